"""The liveness watchdog of a replica group (seed §7.2): a group that lost a shard leaves the
quorum at once, and whole.

Every rank bumps a counter in the group's TCPStore a few times per timeout; rank 0 watches
every rank's counter, the others watch rank 0's (whose process serves the store). A counter
that stands still for `timeout_s`, or a store that stops answering for as long, means a shard
is gone: the rank exits at once, so its torchft Manager stops heartbeating to the Lighthouse,
and Ray Train sees the group fail and starts a replacement. Left to itself, a group with a
dead shard hangs in collectives and commit votes while its Manager keeps heartbeating, and
the other groups wait for it at their next quorum; Ray Train's own teardown of such a group
can take as long as its process-group shutdown timeout.

Counters rather than timestamps: the ranks of a group may run on hosts whose clocks differ.
A rank that ends cleanly says so first, so that its peers do not take its exit for a death.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

log = logging.getLogger(__name__)
EXIT_CODE = 75  # EX_TEMPFAIL: this process is fine; its group is not
BEATS_PER_TIMEOUT = 5


def _alive(rank: int) -> str:
    return f"gkr/alive/{rank}"


def _done(rank: int) -> str:
    return f"gkr/done/{rank}"


class Watchdog:
    """One rank's watchdog thread over its replica group."""

    def __init__(self, store: tuple[str, int], group: int, rank: int, size: int,
                 timeout_s: float) -> None:
        self.address, self.group, self.rank, self.size = store, group, rank, size
        self.timeout_s = timeout_s
        self.watched = list(range(1, size)) if rank == 0 else [0]
        self.stopping = threading.Event()
        self.store = self._client()
        self.thread = threading.Thread(target=self._watch, daemon=True, name="gkr-ft-watchdog")
        self.thread.start()

    def _client(self) -> dist.TCPStore:
        host, port = self.address
        return dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                             timeout=timedelta(seconds=self.timeout_s))

    def _watch(self) -> None:
        store = self._client()  # a client of its own: TCPStore clients are not shared
        seen = {rank: (-1, time.monotonic()) for rank in self.watched}
        answered = time.monotonic()
        while not self.stopping.wait(self.timeout_s / BEATS_PER_TIMEOUT):
            try:
                store.add(_alive(self.rank), 1)
                stale = self._stale(store, seen)
                answered = time.monotonic()
            except Exception as error:  # the store's host (rank 0) is gone, or unreachable
                if time.monotonic() - answered > self.timeout_s:
                    self._tear_down(f"rank 0's store stopped answering ({error})")
                continue
            if stale is not None:
                self._tear_down(f"rank {stale} stopped responding")

    def _stale(self, store: dist.TCPStore, seen: dict[int, tuple[int, float]]) -> int | None:
        """A watched rank whose counter stood still for the timeout (not one that ended)."""
        now = time.monotonic()
        for rank in self.watched:
            count = int(store.add(_alive(rank), 0))
            if count != seen[rank][0]:
                seen[rank] = (count, now)
            elif now - seen[rank][1] > self.timeout_s and not store.check([_done(rank)]):
                return rank
        return None

    def _tear_down(self, why: str) -> None:
        if self.stopping.is_set():
            return
        message = (f"replica group {self.group}: {why} for {self.timeout_s:g}s; rank "
                   f"{self.rank} exits so that the whole group leaves the quorum")
        log.error(message)
        print(message, file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)

    def close(self) -> None:
        """This rank ends: say so, stop watching, and (rank 0, which serves the store) wait
        a while for the others to say so too."""
        try:
            self.store.set(_done(self.rank), "1")
        except Exception as error:  # the group is going down anyway
            log.warning("watchdog: could not record a clean end: %s", error)
        self.stopping.set()
        self.thread.join()
        if self.rank == 0 and self.size > 1:
            self._await_peers()

    def _await_peers(self) -> None:
        try:
            self.store.wait([_done(rank) for rank in self.watched],
                            timedelta(seconds=self.timeout_s))
        except Exception as error:  # a peer died first: Ray Train deals with it
            log.warning("watchdog: not every rank ended cleanly: %s", error)
