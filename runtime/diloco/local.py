"""A DiLoCo experiment on this machine (`gkr run --local --diloco N`): the synchroniser and N
learners as local processes on loopback, each learner a normal training run
(`python -m runtime.train`) on its own local Ray instance, as each learner of a cluster
experiment is a RayJob on its own RayCluster.

Every process gets what `gkr render` gives the pods of a cluster experiment: the run
identity (`GKR_RUN`, `GKR_LEARNER`) and its settings as JSON in `GKR_DILOCO`. Their output
is printed with the process's name in front.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from runtime.diloco.config import DilocoConfig, SynchroniserConfig
from runtime.diloco.errors import DilocoError
from runtime.diloco.keys import SYNCHRONISER as SYNCHRONISER_KEYS
from runtime.diloco.keys import experiment_files, write_files
from runtime.identity import Env
from runtime.procs import tied_argv
from runtime.run.config import TrainConfig
from runtime.telemetry.store import default_dsn

Printer = Callable[[str], None]
START_TIMEOUT_S = 120.0
POLL_S = 0.5
SYNCHRONISER = "synchroniser"
CHDB = "chdb://"


@dataclass(frozen=True)
class Outcome:
    """How each process ended (its exit status, by name)."""

    codes: dict[str, int]

    @property
    def ok(self) -> bool:
        return not any(self.codes.values())


def learner_names(count: int) -> list[str]:
    return [f"learner-{index}" for index in range(count)]


def synchroniser_settings(config: TrainConfig, names: Sequence[str],
                          keys: Path) -> SynchroniserConfig:
    """The local synchroniser: loopback, the section's outer optimizer and round timeout, and
    its outer state beside the learners' checkpoints (so a rerun of the run resumes)."""
    section, checkpoint = config.diloco, config.checkpoint
    saved = f"{checkpoint.uri.rstrip('/')}/synchroniser" \
        if checkpoint is not None and checkpoint.enabled else None
    return SynchroniserConfig(bind="tcp://127.0.0.1:*", run=config.run.name,
                              learners=tuple(names), outer=section.outer,
                              round_timeout_s=section.round_timeout_s, checkpoint=saved,
                              keys=str(keys))


def learner_settings(section: DilocoConfig, endpoint: str, names: Sequence[str],
                     index: int, keys: Path) -> DilocoConfig:
    return section.model_validate({**section.model_dump(), "enabled": True,
                                   "endpoint": endpoint, "learner": names[index],
                                   "index": index, "learners": len(names), "keys": str(keys),
                                   "plaintext": False})


def run_keys(folder: Path, names: Sequence[str]) -> dict[str, Path]:
    """CURVE keys made for this run, each party's in a folder of its own below `folder`
    (private to this user: 0700, files 0400), as a cluster experiment's come in Secrets."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    return {party: write_files(folder / party, files)
            for party, files in experiment_files(names).items()}


def run_experiment(config: TrainConfig, train_argv: Sequence[str], learners: int,
                   echo: Printer) -> Outcome:
    """Start the synchroniser, then the learners (each `python -m runtime.train` with
    `train_argv`); wait for all; their exit statuses."""
    names = learner_names(learners)
    with tempfile.TemporaryDirectory(prefix="gkr-diloco-keys-") as private:  # made 0700
        keys = run_keys(Path(private), names)
        return _run(config, train_argv, names, keys, echo)


def _run(config: TrainConfig, train_argv: Sequence[str], names: list[str],
         keys: dict[str, Path], echo: Printer) -> Outcome:
    identity = {Env.RUN: config.run.name}
    settings = synchroniser_settings(config, names, keys[SYNCHRONISER_KEYS]).model_dump_json()
    sync = _Process([sys.executable, "-m", "runtime.diloco"], SYNCHRONISER,
                    {**identity, Env.DILOCO: settings}, echo)
    endpoint = sync.endpoint()
    echo(f"synchroniser listening on {endpoint} (CURVE); starting {len(names)} learners")
    running = [_Process([sys.executable, "-m", "runtime.train", *train_argv,
                         *_own_telemetry(config, name)], name, {
        **identity, Env.LEARNER: name,
        Env.DILOCO: learner_settings(config.diloco, endpoint, names, index,
                                     keys[name]).model_dump_json(),
    }, echo) for index, name in enumerate(names)]
    try:
        return Outcome(_wait_all([*running, sync]))
    finally:  # interrupted (Ctrl-C): no process outlives the command
        for process in (*running, sync):
            process.stop()


def _own_telemetry(config: TrainConfig, name: str) -> list[str]:
    """A chDB store opens from one process at a time: each local learner records into a
    folder of its own below the run's store (a ClickHouse server takes them all)."""
    section = config.telemetry
    dsn = section.dsn or default_dsn()
    if not section.enabled or not dsn.startswith(CHDB):
        return []
    return [f"telemetry.dsn={dsn.rstrip('/')}/learners/{name}"]


def _wait_all(processes: list[_Process]) -> dict[str, int]:
    """Every process's exit status; when one fails, the others are stopped (a learner that
    never leaves would keep the synchroniser, and so the rest, waiting)."""
    while any(process.running for process in processes):
        if any(process.failed for process in processes):
            for process in processes:
                process.stop()
        time.sleep(POLL_S)
    return {process.name: process.wait() for process in processes}


class _Process:
    """A child process whose output lines are printed, prefixed, as they come."""

    def __init__(self, argv: list[str], name: str, env: dict[str, str], echo: Printer) -> None:
        self.name, self.echo = name, echo
        self.process = subprocess.Popen(tied_argv(argv), env={**os.environ, **env}, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                       daemon=True, name=f"gkr-{name}")
        self.reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.append(line.rstrip())
            self.echo(f"[{self.name}] {line.rstrip()}")

    def endpoint(self) -> str:
        """The address the synchroniser printed first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = next((m[1] for line in self.lines
                          if (m := re.search(r"listening on (\S+)", line))), None)
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise DilocoError("the local synchroniser did not start; its output is above")

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def failed(self) -> bool:
        return self.process.poll() not in (None, 0)

    def wait(self) -> int:
        code = self.process.wait()
        self.reader.join()
        return code

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
