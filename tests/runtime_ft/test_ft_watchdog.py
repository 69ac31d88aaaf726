"""The replica group's liveness watchdog with real processes and a real TCPStore: a SIGKILLed
shard takes the rest of its group down; ranks that end cleanly take nobody down."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Iterator

import pytest
import torch.distributed as dist

from runtime.ft.watchdog import BEATS_PER_TIMEOUT, EXIT_CODE, Watchdog
from testing.wait import wait_until

TIMEOUT_S = 1.0


@pytest.fixture
def store() -> Iterator[int]:
    """The group's store (rank 0 serves it in a run; here the test does, to outlive ranks)."""
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield server.port


def _rank(port: int, rank: int, work_s: float) -> None:
    watchdog = Watchdog(("127.0.0.1", port), 0, rank, 2, TIMEOUT_S)
    time.sleep(work_s)  # training
    watchdog.close()


def _start(port: int, work_s: tuple[float, float]) -> list[mp.process.BaseProcess]:
    ctx = mp.get_context("fork")
    procs: list[mp.process.BaseProcess] = [
        ctx.Process(target=_rank, args=(port, rank, work_s[rank])) for rank in (0, 1)]
    for proc in procs:
        proc.start()
    return procs


def _beats(port: int, rank: int) -> int:
    """How often `rank` has beaten (the watchdog's counter in the store)."""
    client = dist.TCPStore("127.0.0.1", port, is_master=False)
    return int(client.add(f"gkr/alive/{rank}", 0))


def test_a_killed_shard_takes_its_whole_group_down(store: int) -> None:
    rank0, rank1 = _start(store, (120.0, 120.0))
    wait_until(lambda: min(_beats(store, 0), _beats(store, 1)) >= 2 * BEATS_PER_TIMEOUT,
               60, "both ranks beating for a timeout's length")
    assert rank0.is_alive()
    os.kill(rank1.pid or 0, signal.SIGKILL)
    rank0.join(60)  # generous under load; it goes after TIMEOUT_S of silence
    assert rank0.exitcode == EXIT_CODE


def test_ranks_that_end_cleanly_at_different_times_take_nobody_down(store: int) -> None:
    procs = _start(store, (0.5, 4 * TIMEOUT_S))  # rank 0 waits for rank 1 to end
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0, 0]
