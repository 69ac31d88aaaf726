"""The sample ledger's writing side: which global samples each rank trained, at which step.

Every rank appends one JSON line per committed optimizer step to a file of its own
incarnation, `<folder>/<run_id>/<started>-g<group>-r<rank>-<pid>.jsonl`: its spans of the
global stream (runtime.data.schedule.Span, one per micro-batch), its place (group, rank,
slot) and where its weights came from (origin, resumed_from), so that the verdict
(runtime.telemetry.ledger_verdict) can tell rolled-back steps from the final lineage. The
keys are the columns of the store's `sample_ledger` table: the file loads as it is.

Durable without a flush: each line is one `os.write` to an O_APPEND descriptor, so once the
call returns the kernel holds it, and a SIGKILL of the rank loses no line it wrote (a
single write of a few hundred bytes is not split; a rank killed inside it leaves at worst
a partial last line, which the loader skips and names). No Python buffering, no fsync: the
node surviving is the filesystem's concern, and a step costs one syscall (benchmarks/train.py).

Where the files go (`ledger_folder`): GKR_LEDGER_DIR when set (in pods the generator points
it at the node's telemetry folder, generator/telemetry.py, where Fluent Bit tails it); else
beside a local chDB store (`<store folder>/ledger`); else `.gkr/ledger` under the current
directory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:  # the generator imports LEDGER_DIR: keep this module light
    from runtime.data.schedule import Span

__all__ = ["LEDGER_DIR", "LedgerWriter", "OriginKind", "ledger_folder", "on_this_node"]

LEDGER_DIR: Final = "GKR_LEDGER_DIR"  # the node's ledger folder in a pod (generator/telemetry.py)
LOCAL_FOLDER: Final = Path(".gkr") / "ledger"
OriginKind = Literal["fresh", "checkpoint", "heal"]


def ledger_folder(dsn: str, environ: Mapping[str, str] | None = None,
                  cwd: Path | None = None) -> Path:
    """Where a run's ledger files go (absolute): GKR_LEDGER_DIR, else beside a local chDB
    store `chdb:///folder` in `folder/ledger`, else `.gkr/ledger` under `cwd`."""
    env = os.environ if environ is None else environ
    if env.get(LEDGER_DIR):
        return Path(env[LEDGER_DIR])
    parts = urlsplit(dsn)
    if parts.scheme == "chdb":
        return Path(parts.netloc + parts.path).resolve() / "ledger"
    return ((cwd or Path.cwd()) / LOCAL_FOLDER).resolve()


def on_this_node(folder: Path, environ: Mapping[str, str] | None = None) -> Path:
    """The folder a rank writes to: its own pod's GKR_LEDGER_DIR wins over the driver's
    choice (the driver's pod may have none, or another node's)."""
    env = os.environ if environ is None else environ
    return Path(env[LEDGER_DIR]) if env.get(LEDGER_DIR) else folder


class LedgerWriter:
    """One rank incarnation's ledger file; `record` once per committed step."""

    def __init__(self, folder: Path, run_id: str, group: int, rank: int, origin: OriginKind,
                 resumed_from: int, *, started: int | None = None) -> None:
        """`started`: time.time_ns() when this incarnation started training (default now)."""
        self.started = time.time_ns() if started is None else started
        self.origin = (origin, resumed_from)
        self.path = folder / run_id / f"{self.started}-g{group}-r{rank}-{os.getpid()}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # The keys every line repeats, serialized once: the line is their JSON plus the step's.
        fixed = {"run_id": run_id, "started": self.started, "origin": origin,
                 "resumed_from": resumed_from, "group": group, "rank": rank,
                 "pid": os.getpid()}
        self._fixed = json.dumps(fixed, separators=(",", ":"))[1:-1]
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                       | os.O_CLOEXEC, 0o644)

    def record(self, step: int, spans: Sequence[Span]) -> None:
        """The step's spans (one per micro-batch), as one line written by one syscall. A step
        without spans (no batch taken) writes nothing."""
        if not spans or self._fd is None:
            return
        first = spans[0]
        row = {"step": step, "at": time.time(), "slot": first.slot, "slots": first.slots,
               "epoch_size": first.epoch_size, "starts": [s.start for s in spans],
               "count": first.count, "batch_starts": [s.batch_start for s in spans],
               "batch_count": first.batch_count}
        line = f"{{{self._fixed},{json.dumps(row, separators=(',', ':'))[1:]}\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        """Close the file; safe to call twice."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
