"""Real processes for the DiLoCo tests and benchmark: the synchroniser
(`python -m runtime.diloco`) and toy learners (`python -m tests.diloco.toy`), on loopback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.diloco.keys import SYNCHRONISER
from runtime.diloco.local import run_keys
from testing.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120.0  # a torch import on a loaded two-core machine takes seconds
RUN_TIMEOUT_S = 600.0
ROUND = re.compile(r"round (\d+): merged (\d+) learners \(([^)]*)\)(?:, dropped ([^;]*))?; "
                   r"([\d.]+) MB in, ([\d.]+) MB out, ([\d.]+) s")


@dataclass
class Synchroniser:
    process: subprocess.Popen[bytes]
    endpoint: str
    log: Path

    def rounds(self) -> list[dict[str, Any]]:
        """Every merge the synchroniser logged."""
        return [{"round": int(m[1]), "learners": m[3].split(", "),
                 "dropped": m[4].split(", ") if m[4] else [], "mb_in": float(m[5]),
                 "mb_out": float(m[6]), "seconds": float(m[7])}
                for m in ROUND.finditer(self.log.read_text())]

    def wait(self) -> int:
        return self.process.wait(RUN_TIMEOUT_S)


def start_synchroniser(folder: Path, *flags: str) -> Synchroniser:
    """A synchroniser on a free loopback port, with CURVE keys made for the learners its
    `--learners` flag names (`keys(folder)`, as a local run makes them); returns once it
    listens."""
    log, out = folder / "synchroniser.log", folder / "synchroniser.out"
    names = flags[flags.index("--learners") + 1].split(",")
    folders = run_keys(keys(folder), names)
    with log.open("wb") as err, out.open("wb") as std:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.diloco", "--bind", "tcp://127.0.0.1:*", "--keys",
             str(folders[SYNCHRONISER]), *flags], cwd=ROOT, stdout=std, stderr=err)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = re.search(r"listening on (\S+)", out.read_text())
        if found:
            return Synchroniser(process, found[1], log)
        if process.poll() is not None:
            raise AssertionError(f"the synchroniser exited: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the synchroniser did not start")


def keys(folder: Path) -> Path:
    """Where a test's synchroniser made the experiment's keys (one folder per party)."""
    return folder / "keys"


def start_toy(folder: Path, role: str, name: str, *flags: str) -> subprocess.Popen[bytes]:
    """A toy learner or torchft replica writing `<name>.json` (and its log) into `folder`;
    a learner gets its keys from the synchroniser's `keys(folder)`."""
    if role == "learner":
        flags = (*flags, "--keys", str(keys(folder) / flags[flags.index("--learner") + 1]))
    with (folder / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.diloco.toy", role, "--out",
             str(folder / f"{name}.json"), *flags], cwd=ROOT, stdout=log, stderr=log)


def finish(folder: Path, name: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Wait for a toy process; its result."""
    code = process.wait(RUN_TIMEOUT_S)
    log = (folder / f"{name}.log").read_text()
    assert code == 0, f"{name} exited {code}: {log[-3000:]}"
    result: dict[str, Any] = json.loads((folder / f"{name}.json").read_text())
    return result


def wait_for(path: Path, text: str | None = None) -> None:
    """Until `path` exists (and holds `text`)."""
    wait_until(lambda: path.exists() and (text is None or text in path.read_text()),
               START_TIMEOUT_S, f"{path} to appear" + (f" holding {text!r}" if text else ""))
