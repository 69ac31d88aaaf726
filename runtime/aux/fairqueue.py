"""Per-connection bounded queues served round-robin, so a few busy peers cannot starve the
others, under a total bound per worker.

The round-robin is kept with start-time fair queueing (Goyal, Vin and Cheng, SIGCOMM 1996)
at unit cost per request: a key's k-th queued request is tagged one round after its
(k-1)-th, and the smallest tag is served next. Among keys that keep work queued this is
exactly round-robin. A key that had nothing queued joins the round in progress instead of
the end of the line, so a quiet key waits for at most the request in service and one turn
of each other key, never for a flooding key's backlog; and since its tags also advance by
one per request, no key can take more than its turn by going idle and coming back.

The worker keys its queues by the connection a request came on (runtime.aux.worker), not by
anything the request says about itself. The total bound caps what many connections hold
together, so that the worker's memory stays bounded however many peers connect.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class FairQueues(Generic[K, T]):
    """One bounded FIFO per key; `take` serves the keys in rotation."""

    def __init__(self, capacity: int, total: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        if total is not None and total < 1:
            raise ValueError(f"total queue bound must be >= 1, got {total}")
        self.capacity, self.total = capacity, total
        self._heap: list[tuple[int, int, K, T]] = []  # (round, arrival, key, item)
        self._arrivals = itertools.count()
        self._next_round: dict[K, int] = {}  # key -> round of its next request
        self._queued: dict[K, int] = {}  # key -> requests queued
        self._round = 0  # the round of the request served last

    def offer(self, key: K, item: T) -> bool:
        """Queue `item` for `key`; False when that key's queue or the total is full
        (back-pressure)."""
        queued = self._queued.get(key, 0)
        if queued >= self.capacity or (self.total is not None and len(self._heap) >= self.total):
            return False
        turn = max(self._round, self._next_round.get(key, 0))
        self._next_round[key] = turn + 1
        self._queued[key] = queued + 1
        heapq.heappush(self._heap, (turn, next(self._arrivals), key, item))
        return True

    def take(self) -> T | None:
        """The oldest item of the key whose turn it is, or None when every queue is empty."""
        if not self._heap:
            return None
        self._round, _, key, item = heapq.heappop(self._heap)
        left = self._queued[key] - 1
        if left:
            self._queued[key] = left
        else:
            del self._queued[key]
            if len(self._next_round) > 2 * len(self._queued) + 64:
                self._forget_idle()
        return item

    def _forget_idle(self) -> None:
        """Drop the keys whose next request would join the round in progress anyway (their
        next round is not ahead of it): they are as if never seen, and connections that
        come and go do not grow the bookkeeping. Amortised: it runs when the keys
        remembered outnumber twice those queued."""
        self._next_round = {key: turn for key, turn in self._next_round.items()
                            if turn > self._round or key in self._queued}

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[T]:
        """The queued items, in no particular order."""
        return (entry[3] for entry in self._heap)
