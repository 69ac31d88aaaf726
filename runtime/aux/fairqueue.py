"""Per-rank bounded queues served round-robin, so a few busy ranks cannot starve the others.

The round-robin is kept with start-time fair queueing (Goyal, Vin and Cheng, SIGCOMM 1996)
at unit cost per request: a rank's k-th queued request is tagged one round after its
(k-1)-th, and the smallest tag is served next. Among ranks that keep work queued this is
exactly round-robin. A rank that had nothing queued joins the round in progress instead of
the end of the line, so a quiet rank waits for at most the request in service and one turn
of each other rank, never for a flooding rank's backlog; and since its tags also advance by
one per request, no rank can take more than its turn by going idle and coming back.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueues(Generic[T]):
    """One bounded FIFO per training rank; `take` serves the ranks in rotation."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._heap: list[tuple[int, int, int, T]] = []  # (round, arrival, rank, item)
        self._arrivals = itertools.count()
        self._next_round: dict[int, int] = {}  # rank -> round of its next request
        self._queued: dict[int, int] = {}  # rank -> requests queued
        self._round = 0  # the round of the request served last

    def offer(self, rank: int, item: T) -> bool:
        """Queue `item` for `rank`; False when that rank's queue is full (back-pressure)."""
        queued = self._queued.get(rank, 0)
        if queued >= self.capacity:
            return False
        turn = max(self._round, self._next_round.get(rank, 0))
        self._next_round[rank] = turn + 1
        self._queued[rank] = queued + 1
        heapq.heappush(self._heap, (turn, next(self._arrivals), rank, item))
        return True

    def take(self) -> T | None:
        """The oldest item of the rank whose turn it is, or None when every queue is empty."""
        if not self._heap:
            return None
        self._round, _, rank, item = heapq.heappop(self._heap)
        self._queued[rank] -= 1
        return item

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[T]:
        """The queued items, in no particular order."""
        return (entry[3] for entry in self._heap)
