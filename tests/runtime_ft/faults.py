"""Datasets that inject the failures the fault-tolerance tests and benchmark need.

They run in the loader's producer processes, whose parent is the training rank; a producer
that reads a marked sample, or the first one to read after a test or benchmark asked for a
kill (a `request-kill` file), SIGKILLs its rank (the rank dies as a process does on a lost node
or an OOM kill). A marker file per kill makes each one happen once, also after a restart.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path

import torch

from runtime.data.synthetic import SyntheticFeatures

REQUEST = "request-kill"


class PacedFeatures(SyntheticFeatures):
    """SyntheticFeatures read at most one per `pace_s` while the file `pace` exists in
    `folder` (a test removes it to let the run finish quickly), killing the reading rank on
    each index of `kill_at` once."""

    def __init__(self, folder: str, pace_s: float = 0.0, kill_at: tuple[int, ...] = (),
                 **kw: int) -> None:
        super().__init__(**kw)
        self.folder, self.pace_s, self.kill_at = Path(folder), pace_s, set(kill_at)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index in self.kill_at:
            kill_rank_once(self.folder, f"kill-{index}")
        if (self.folder / REQUEST).exists():
            kill_on_request(self.folder)
        if self.pace_s and (self.folder / "pace").exists():
            time.sleep(self.pace_s)
        return super().__getitem__(index)


def request_kill(folder: Path) -> None:
    """Ask for one kill: the first producer of any rank to read next kills its rank."""
    (folder / REQUEST).touch()


def kill_on_request(folder: Path) -> None:
    """Claim the pending request (one producer wins the rename) and kill this rank."""
    claimed = folder / f"claimed-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(folder / REQUEST, claimed)
    except FileNotFoundError:  # another producer was first
        return
    kill_rank_once(folder, f"kill-request-{time.time_ns()}")


def kill_rank_once(folder: Path, name: str) -> None:
    """SIGKILL the training rank (this producer's parent) unless `name` was done before;
    the marker records when and whom."""
    parent = mp.parent_process()
    if parent is None or parent.pid is None:
        return
    try:
        fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as marker:
        json.dump({"at": time.time(), "pid": parent.pid}, marker)
    os.kill(parent.pid, signal.SIGKILL)
