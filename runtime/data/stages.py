"""Bodies of the pipeline's processes: feeder, producers and collators.

Every wait is a short timed wait that also checks the stop event and whether the parent
(the training rank) is still alive, so a stage never outlives its rank or hangs on a
dead neighbour. A stage that fails reports its traceback on the error queue and exits.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from runtime.components import build_callable
from runtime.data.config import DataConfig
from runtime.data.schedule import GlobalSchedule, RankBatch, SamplerState
from runtime.data.shm import SlotRing, pack, unpack
from runtime.data.sources import LocalSource, SampleSource
from runtime.procs import die_with_parent

_POLL_S = 0.1
# What fills a chunk slot and a batch slot, for the error that says one does not fit.
CHUNK = "a producer chunk (data.chunk_size samples)"
BATCH = "a batch (data.batch_size samples)"


class Stopped(Exception):
    """The pipeline is shutting down or its rank is gone; the stage exits quietly."""


@dataclass(frozen=True)
class Links:
    """The queues, events and shared-memory rings that join the stages (picklable)."""

    work: Any
    to_collators: list[Any]
    to_trainer: list[Any]
    free_chunks: Any
    free_batches: Any
    errors: Any
    stop: Any
    credits: Any
    chunk_ring: tuple[int, int, str]
    batch_ring: tuple[int, int, str]


@dataclass(frozen=True)
class Chunk:
    """A producer work item: part `part` of `parts` of rank batch `seq`."""

    seq: int
    part: int
    parts: int
    datasets: np.ndarray
    indices: np.ndarray
    seeds: np.ndarray
    after: SamplerState


@dataclass(frozen=True)
class Layout:
    """The rank's place in the world and where its schedule starts."""

    rank: int
    world_size: int
    lengths: list[int]
    start: SamplerState
    first_seq: int = 0  # the sequence number of the batch at `start`


def _check(links: Links) -> None:
    # parent_process() watches the rank's sentinel; getppid() would name the forkserver.
    parent = mp.parent_process()
    if links.stop.is_set() or (parent is not None and not parent.is_alive()):
        raise Stopped


def get(q: Any, links: Links) -> Any:
    while True:
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            _check(links)


def put(q: Any, item: Any, links: Links) -> None:
    while True:
        try:
            return q.put(item, timeout=_POLL_S)
        except queue.Full:
            _check(links)


def acquire(sem: Any, links: Links) -> None:
    while not sem.acquire(timeout=_POLL_S):
        _check(links)


def run_stage(name: str, links: Links, body: Callable[..., None], *args: Any) -> None:
    """Process entry point: run `body`, turning a failure into a report on the error queue.
    The stage dies with the rank (runtime.procs)."""
    die_with_parent()
    try:
        body(links, *args)
    except Stopped:
        return
    except BaseException as exc:
        links.errors.put((name, "".join(traceback.format_exception(exc))))
        raise SystemExit(1) from None


def schedule_batches(config: DataConfig, layout: Layout) -> Iterator[RankBatch]:
    """This rank's batches from `layout.start` on, endlessly."""
    schedule = GlobalSchedule(
        layout.lengths,
        [d.weight for d in config.datasets],
        seed=config.seed,
        shuffle=config.shuffle,
        samples_per_epoch=config.samples_per_epoch,
    )
    return schedule.rank_batches(
        layout.start, world_size=layout.world_size, rank=layout.rank, batch_size=config.batch_size
    )


def chunks(config: DataConfig, batch: RankBatch, first_seq: int) -> list[Chunk]:
    """The producers' work items of one batch."""
    step = config.chunk_size or config.batch_size
    parts = -(-config.batch_size // step)
    cuts = [slice(p * step, (p + 1) * step) for p in range(parts)]
    return [Chunk(batch.seq + first_seq, p, parts, batch.datasets[cut], batch.indices[cut],
                  batch.seeds[cut], batch.after) for p, cut in enumerate(cuts)]


def feeder(links: Links, config: DataConfig, layout: Layout) -> None:
    """Queue the sample indices of this rank's batches, at most `window` batches ahead."""
    for batch in schedule_batches(config, layout):
        acquire(links.credits, links)
        for chunk in chunks(config, batch, layout.first_seq):
            put(links.work, chunk, links)


def producer(
    links: Links, config: DataConfig, make_source: Callable[[], SampleSource] | None = None
) -> None:
    """Fetch and transform work items into chunk slots, addressed to the batch's collator.
    `make_source` builds where the samples come from (runtime.data.aux_producer: an
    auxiliary loader); None: this rank's own datasets."""
    # Parallelism comes from the producer count; intra-op threads in every producer would
    # oversubscribe the cores (torch's DataLoader workers make the same choice).
    torch.set_num_threads(1)
    source: SampleSource = make_source() if make_source is not None else LocalSource(config)
    ring = SlotRing(*links.chunk_ring)
    collators = len(links.to_collators)
    while True:
        chunk: Chunk = get(links.work, links)
        samples = source.fetch(chunk.datasets, chunk.indices, chunk.seeds)
        slot = get(links.free_chunks, links)
        spec = pack(samples, ring.view(slot), what=CHUNK)
        message = (chunk.seq, chunk.part, chunk.parts, chunk.after, slot, spec)
        put(links.to_collators[chunk.seq % collators], message, links)


class _Assembler:
    """Collects the chunks of one collator's batches and releases them in sequence order."""

    def __init__(self, links: Links, index: int, collate: Callable[[list[Any]], Any]) -> None:
        self.links, self.collate = links, collate
        self.chunks, self.batches = SlotRing(*links.chunk_ring), SlotRing(*links.batch_ring)
        self.parts: dict[int, dict[int, tuple[int, Any]]] = {}
        self.ready: dict[int, tuple[SamplerState, int, Any]] = {}
        self.next_seq, self.stride = index, len(links.to_collators)
        self.out = links.to_trainer[index]

    def add(
        self, seq: int, part: int, parts: int, after: SamplerState, slot: int, spec: Any
    ) -> None:
        got = self.parts.setdefault(seq, {})
        got[part] = (slot, spec)
        if len(got) == parts:
            self.ready[seq] = (after, *self._build(self.parts.pop(seq)))
        while self.next_seq in self.ready:
            put(self.out, (self.next_seq, *self.ready.pop(self.next_seq)), self.links)
            self.next_seq += self.stride

    def _build(self, got: dict[int, tuple[int, Any]]) -> tuple[int, Any]:
        samples: list[Any] = []
        for part in sorted(got):
            slot, spec = got[part]
            samples.extend(unpack(spec, self.chunks.view(slot), copy=False))
        batch = self.collate(samples)
        slot = get(self.links.free_batches, self.links)
        spec = pack(batch, self.batches.view(slot), what=BATCH)
        del samples, batch
        for chunk_slot, _ in got.values():
            put(self.links.free_chunks, chunk_slot, self.links)
        return slot, spec


def collate_function(config: DataConfig) -> Callable[[list[Any]], Any]:
    """The configured collate function, or torch's default_collate (stacks tensors)."""
    if config.collate:
        return build_callable(config.collate, "data.collate")
    from torch.utils.data import default_collate

    return default_collate


def collator(links: Links, config: DataConfig, index: int) -> None:
    """Turn complete sets of chunks into batches in batch slots, in schedule order."""
    torch.set_num_threads(1)
    assembler = _Assembler(links, index, collate_function(config))
    while True:
        assembler.add(*get(links.to_collators[index], links))
