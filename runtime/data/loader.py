"""The training rank's side of the pipeline: starts the stages, yields batches in order,
reports a failed stage as an error and records sampling progress for checkpoints.

The first batch after a start or a resume is made here, in the rank, as a producer and a
collator would make it, so it does not wait for stage processes to start, for its chunks to
cross three queues and for fresh shared memory to be touched (which kept the first batch at
1.0-1.7x torchdata's StatefulDataLoader's time, benchmarks/dataloader.py). The stages start
with the second batch. The price: a sample whose read kills its process (a crashing decoder)
takes the rank down with it in the first batch, where a producer would have died instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing as mp
import queue
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import Any

# Imported here so that stage processes, forked from this one, inherit them: numpy loads
# numpy.random on first use, and each stage importing it on its own cost a resumed pipeline
# ~60 ms of CPU per stage before its first batch (measured). A forkserver preloads them.
import numpy.random  # noqa: F401

from runtime.data import stages
from runtime.data.config import DataConfig, check_data
from runtime.data.schedule import RankBatch, SamplerState, Span, epoch_size, span_at
from runtime.data.shm import SlotRing, check_fits, unpack
from runtime.data.sources import (
    LocalSource,
    SampleSource,
    as_a_producer,
    build_datasets,
    dataset_lengths,
)
from runtime.errors import RuntimeFailure
from runtime.procs import FORKSERVER_PRELOAD

_POLL_S = 0.2
SourceFactory = Callable[[], SampleSource]
_CLOSE_GRACE_S = 2.0


class DataPipelineError(RuntimeFailure):
    """A pipeline stage crashed, exited or stalled; names the stage and the cause."""


class _Running:
    """The processes and shared resources of one started pipeline."""

    def __init__(
        self, config: DataConfig, layout: stages.Layout, source: SourceFactory | None
    ) -> None:
        ctx = mp.get_context(config.start_method)
        parts = -(-config.batch_size // (config.chunk_size or config.batch_size))
        window = config.collators * config.prefetch_batches
        slot_bytes = int(config.slot_mb * (1 << 20))
        # The window bounds batches in flight, and the rings hold a whole window, so no
        # stage ever waits for a slot that only a later batch could free.
        self.chunk_ring = SlotRing(window * parts, slot_bytes)
        self.batch_ring = SlotRing(window, slot_bytes)
        self.links = self._links(ctx, config, window, parts)
        self.ctx: Any = ctx  # a start method's context (its Process class)
        self.config = config
        self.feeder_layout = self._queue_first_window(layout, window)
        self.procs = self._spawn(ctx, config, source)

    def _queue_first_window(self, layout: stages.Layout, window: int) -> stages.Layout:
        """Queue the first `window` batches' work here, so that the producers start at once
        and the feeder is off the first batch's path (`start_feeder` runs once that batch is
        out); returns where the feeder then starts. A few milliseconds of numpy here."""
        batches = stages.schedule_batches(self.config, layout)
        after = layout.start
        for batch in itertools.islice(batches, window):
            self.links.credits.acquire()  # free: the semaphore starts at `window`
            for chunk in stages.chunks(self.config, batch, layout.first_seq):
                self.links.work.put(chunk)  # fits: the queue holds a window of chunks
            after = batch.after
        return dataclasses.replace(layout, start=after, first_seq=layout.first_seq + window)

    def start_feeder(self) -> None:
        """Start the feeder, which queues the batches after the first window."""
        if "feeder" not in self.procs:
            self.procs["feeder"] = self._process("feeder", stages.feeder, self.config,
                                                 self.feeder_layout)

    def _links(self, ctx: Any, config: DataConfig, window: int, parts: int) -> stages.Links:
        free_chunks, free_batches = ctx.Queue(), ctx.Queue()
        for slot in range(window * parts):
            free_chunks.put(slot)
        for slot in range(window):
            free_batches.put(slot)
        return stages.Links(
            work=ctx.Queue(maxsize=window * parts),
            to_collators=[ctx.Queue(maxsize=window * parts) for _ in range(config.collators)],
            to_trainer=[ctx.Queue(maxsize=window) for _ in range(config.collators)],
            free_chunks=free_chunks,
            free_batches=free_batches,
            errors=ctx.Queue(),
            stop=ctx.Event(),
            credits=ctx.Semaphore(window),
            chunk_ring=self.chunk_ring.attach_args(),
            batch_ring=self.batch_ring.attach_args(),
        )

    def _spawn(
        self, ctx: Any, config: DataConfig, source: SourceFactory | None
    ) -> dict[str, Any]:
        if config.start_method == "forkserver":  # no effect once this process's server runs
            ctx.set_forkserver_preload([FORKSERVER_PRELOAD, stages.__name__, "numpy.random"])
        plan: dict[str, tuple[Any, ...]] = {}
        for i in range(config.producers):
            plan[f"producer-{i}"] = (stages.producer, config, source)
        for i in range(config.collators):
            plan[f"collator-{i}"] = (stages.collator, config, i)
        return {name: self._process(name, body, *args) for name, (body, *args) in plan.items()}

    def _process(self, name: str, body: Any, *args: Any) -> Any:
        proc = self.ctx.Process(
            target=stages.run_stage,
            args=(name, self.links, body, *args),
            daemon=True,
            name=f"data-{name}",
        )
        proc.start()
        return proc

    def failure(self) -> DataPipelineError | None:
        """The first reported or observed stage failure, if any."""
        with contextlib.suppress(queue.Empty):
            return _reported(*self.links.errors.get_nowait())
        for name, proc in self.procs.items():
            if proc.exitcode is not None:
                with contextlib.suppress(queue.Empty):
                    return _reported(*self.links.errors.get(timeout=1.0))
                return DataPipelineError(
                    f"data pipeline stage {name} exited with code {proc.exitcode}"
                )
        return None

    def close(self) -> None:
        self.links.stop.set()
        deadline = time.monotonic() + _CLOSE_GRACE_S
        for proc in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs.values():
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.links.free_batches.cancel_join_thread()
        for ring in (self.chunk_ring, self.batch_ring):
            with contextlib.suppress(BufferError):
                ring.close()


def _reported(name: str, trace: str) -> DataPipelineError:
    last = trace.strip().splitlines()[-1]
    return DataPipelineError(f"data pipeline stage {name} failed: {last}\n{trace}")


def _preload(config: DataConfig) -> None:
    """Import the transform's and collate function's modules here, where forked stages
    inherit them, rather than once in every stage (and fail here on a bad name or keyword)."""
    check_data(config)
    if not config.collate:
        import torch.utils.data  # noqa: F401  (the collators' default_collate)


class DataPipeline(Iterator[Any]):
    """This rank's endless, deterministic batch stream (feeder → producers → collators).

    Batches are copies owned by the caller. `state_dict()` is the schedule position after
    the last batch returned; a pipeline built from it yields exactly the batches that would
    have followed, whatever the producer or collator counts. `source`, when given, builds
    the producers' sample source in each producer process (runtime.data.aux_producer); the
    rank then makes no batch itself.
    """

    def __init__(
        self,
        config: DataConfig,
        *,
        rank: int = 0,
        world_size: int = 1,
        state: dict[str, int] | None = None,
        source: SourceFactory | None = None,
    ) -> None:
        self.config, self.rank, self.world_size = config, rank, world_size
        self.source = source
        datasets = build_datasets(config)
        self._lengths = dataset_lengths(datasets)
        # Kept for the first batch only (the stages build their own).
        self._datasets: list[Any] | None = datasets if source is None else None
        _preload(config)
        self._state = SamplerState.from_dict(state) if state else SamplerState()
        self._running: _Running | None = None
        self._next_seq = 0
        self._finalizer: weakref.finalize | None = None
        self._first_here = source is None  # the next batch starts a stream: make it here
        self._epoch_size = epoch_size(self._lengths, config.samples_per_epoch)
        self.last_span: Span | None = None

    def state_dict(self) -> dict[str, int]:
        return self._state.to_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from `state`; a running pipeline restarts from there on the next batch."""
        self.close()
        self._state = SamplerState.from_dict(state)

    def __next__(self) -> Any:
        if self._first_here:
            return self._make_first()
        running = self._start()
        if self._next_seq:  # the stages' first batch is out: the queued window covered the fork
            running.start_feeder()
        out = running.links.to_trainer[self._next_seq % self.config.collators]
        seq, after, slot, spec = self._wait(running, out)
        if seq != self._next_seq:
            raise DataPipelineError(f"batch {seq} arrived when {self._next_seq} was due")
        batch = unpack(spec, running.batch_ring.view(slot), copy=True)
        running.links.free_batches.put(slot)
        running.links.credits.release()
        self._next_seq += 1
        # The stages cut the stream by the same rule from the state this batch was read at.
        self.last_span = span_at(self._state, size=self._epoch_size, slot=self.rank,
                                 slots=self.world_size, batch_size=self.config.batch_size)
        self._state = after
        return batch

    def _layout(self) -> stages.Layout:
        return stages.Layout(self.rank, self.world_size, self._lengths, self._state)

    def _make_first(self) -> Any:
        """The stream's first batch, made here as the stages would make it (same samples,
        seeds, collate function and slot limits); the stages start with the next one."""
        first = next(stages.schedule_batches(self.config, self._layout()))
        try:
            batch = self._make(first)
        except Exception as error:
            raise _reported("first-batch (in the rank)",
                            "".join(traceback.format_exception(error))) from None
        self._state, self._first_here, self._datasets = first.after, False, None
        self.last_span = first.span
        return batch

    def _make(self, batch: RankBatch) -> Any:
        source = LocalSource(self.config, self._datasets)  # None: built anew (a restart)
        try:
            with as_a_producer():
                samples = source.fetch(batch.datasets, batch.indices, batch.seeds)
                made = stages.collate_function(self.config)(samples)
        finally:
            source.close()
        slot = int(self.config.slot_mb * (1 << 20))
        step = self.config.chunk_size or self.config.batch_size
        for start in range(0, len(samples), step):
            check_fits(samples[start:start + step], slot, what=stages.CHUNK)
        check_fits(made, slot, what=stages.BATCH)
        return made

    def _start(self) -> _Running:
        if self._running is None:
            self._running = _Running(self.config, self._layout(), self.source)
            self._next_seq = 0
            self._finalizer = weakref.finalize(self, self._running.close)
        return self._running

    def _wait(self, running: _Running, out: Any) -> tuple[int, SamplerState, int, Any]:
        deadline = time.monotonic() + self.config.timeout_s
        while True:
            try:
                return out.get(timeout=_POLL_S)
            except queue.Empty:
                failure = running.failure()
                if failure is None and time.monotonic() > deadline:
                    failure = DataPipelineError(
                        f"no batch within data.timeout_s={self.config.timeout_s}s"
                    )
                if failure is not None:
                    self.close()
                    raise failure from None

    def close(self) -> None:
        """Stop every stage and free the shared memory; safe to call twice. A next batch
        restarts the stream where it stands."""
        if self._finalizer is not None:
            self._finalizer()
        self._running, self._finalizer = None, None
        self._first_here = self.source is None

    def __enter__(self) -> DataPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
