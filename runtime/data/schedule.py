"""The deterministic global sampling schedule every loader computes and slices by rank.

The global order of an epoch depends only on (seed, epoch, dataset lengths, weights,
shuffle), never on the world size, the producer count or timing. Progress is a global
sample offset within an epoch, so a resumed run continues the same global stream; after a
world-size change the remaining stream is cut into global batches of the new size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class SamplerState:
    """Where the global schedule stands: the next unread global sample of an epoch."""

    epoch: int = 0
    offset: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    @classmethod
    def from_dict(cls, raw: dict[str, int]) -> SamplerState:
        return cls(epoch=int(raw["epoch"]), offset=int(raw["offset"]))


@dataclass(frozen=True)
class Span:
    """Where one rank's batch sits in the global stream, in global sample indices (epoch e,
    offset o is index e x epoch_size + o): the sample ledger's record of a batch
    (runtime.telemetry.ledger)."""

    slot: int  # the rank's slot of the global batch
    slots: int  # the slots of a global batch (the world the schedule is cut for)
    start: int  # the batch's first global index
    count: int  # its samples (the batch size)
    batch_start: int  # the first global index of the global batch it belongs to
    batch_count: int  # the global batch's samples (slots x count)
    epoch_size: int


@dataclass(frozen=True)
class RankBatch:
    """The samples of one rank's batch and the schedule state once it is consumed."""

    seq: int
    datasets: np.ndarray
    indices: np.ndarray
    seeds: np.ndarray
    after: SamplerState
    span: Span


def _splitmix64(values: np.ndarray) -> np.ndarray:
    # A cheap, well-mixed hash gives each sample its own transform seed, so augmentation
    # does not depend on which producer happens to run it.
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` samples by relative weights (largest remainder, ties to the first)."""
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[: total - int(counts.sum())]] += 1
    return [int(c) for c in counts]


def epoch_size(lengths: Sequence[int], samples_per_epoch: int | None) -> int:
    """The samples of one epoch: `samples_per_epoch`, else every sample of every dataset."""
    return samples_per_epoch or sum(int(n) for n in lengths)


def placed(state: SamplerState, global_batch: int, size: int) -> SamplerState:
    """Where the next global batch starts: an epoch tail shorter than it is dropped."""
    if state.offset + global_batch > size:
        return SamplerState(state.epoch + 1, 0)
    return state


def span_at(state: SamplerState, *, size: int, slot: int, slots: int,
            batch_size: int) -> Span:
    """The span of slot `slot`'s batch of the global batch read at `state`."""
    at = placed(state, slots * batch_size, size)
    first = at.epoch * size + at.offset
    return Span(slot, slots, first + slot * batch_size, batch_size, first, slots * batch_size,
                size)


class GlobalSchedule:
    """The global sample order of every epoch, shared by all ranks of a run."""

    def __init__(
        self,
        lengths: Sequence[int],
        weights: Sequence[float],
        *,
        seed: int,
        shuffle: bool,
        samples_per_epoch: int | None = None,
    ) -> None:
        if not lengths or min(lengths) <= 0:
            raise ValueError(f"every dataset needs at least one sample, got lengths {lengths}")
        self.lengths = [int(n) for n in lengths]
        self.seed, self.shuffle = seed, shuffle
        self.epoch_size = epoch_size(self.lengths, samples_per_epoch)
        self.counts = apportion(self.epoch_size, weights)
        self._cached: tuple[int, np.ndarray, np.ndarray] | None = None

    def _stream(self, dataset: int, start: int, count: int) -> np.ndarray:
        """Positions start..start+count of dataset's endless stream of permutations."""
        n = self.lengths[dataset]
        pos = np.arange(start, start + count, dtype=np.int64)
        if not self.shuffle:
            return pos % n
        out = np.empty(count, dtype=np.int64)
        for rnd in np.unique(pos // n):
            perm = np.random.default_rng([self.seed, 1, dataset, int(rnd)]).permutation(n)
            mask = pos // n == rnd
            out[mask] = perm[pos[mask] % n]
        return out

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(dataset ids, sample indices) of the whole epoch in global order."""
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1], self._cached[2]
        ds = np.concatenate([np.full(c, i, dtype=np.int32) for i, c in enumerate(self.counts)])
        idx = np.concatenate(
            [self._stream(i, epoch * c, c) for i, c in enumerate(self.counts)]
        )
        if self.shuffle:
            perm = np.random.default_rng([self.seed, 2, epoch]).permutation(self.epoch_size)
            ds, idx = ds[perm], idx[perm]
        self._cached = (epoch, ds, idx)
        return ds, idx

    def sample_seeds(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        key = (self.seed * 0x1000193 + epoch) & _MASK64
        mixed = _splitmix64(np.full(len(positions), key, dtype=np.uint64))
        return _splitmix64(mixed ^ positions.astype(np.uint64)) >> np.uint64(1)

    def rank_batches(
        self, state: SamplerState, *, world_size: int, rank: int, batch_size: int
    ) -> Iterator[RankBatch]:
        """Endless stream of this rank's batches from `state`; a short epoch tail is dropped."""
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world of size {world_size}")
        global_batch = world_size * batch_size
        if global_batch > self.epoch_size:
            raise ValueError(
                f"global batch {global_batch} exceeds the epoch of {self.epoch_size} samples"
            )
        state, seq, size = placed(state, global_batch, self.epoch_size), 0, self.epoch_size
        while True:
            span = span_at(state, size=size, slot=rank, slots=world_size, batch_size=batch_size)
            ds, idx = self.epoch_order(state.epoch)
            lo = span.start - state.epoch * size
            pos = np.arange(lo, lo + batch_size, dtype=np.int64)
            after = placed(SamplerState(state.epoch, state.offset + global_batch), global_batch,
                           size)
            yield RankBatch(seq, ds[pos], idx[pos], self.sample_seeds(state.epoch, pos), after,
                            span)
            state, seq = after, seq + 1
