"""Per-rank bounded queues served round-robin, so a few busy ranks cannot starve the others."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class FairQueues(Generic[T]):
    """One bounded FIFO per training rank; `take` visits ranks with work in rotation."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"queue capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._queues: dict[int, deque[T]] = {}
        self._turns: deque[int] = deque()  # ranks with queued work, next to serve first
        self._size = 0

    def offer(self, rank: int, item: T) -> bool:
        """Queue `item` for `rank`; False when that rank's queue is full (back-pressure)."""
        queue = self._queues.setdefault(rank, deque())
        if len(queue) >= self.capacity:
            return False
        if not queue:
            self._turns.append(rank)
        queue.append(item)
        self._size += 1
        return True

    def take(self) -> T | None:
        """The oldest item of the rank whose turn it is, or None when every queue is empty."""
        if not self._turns:
            return None
        rank = self._turns.popleft()
        queue = self._queues[rank]
        item = queue.popleft()
        if queue:
            self._turns.append(rank)
        self._size -= 1
        return item

    def __len__(self) -> int:
        return self._size
