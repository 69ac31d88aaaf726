"""A replica group's share of the loader's global sample stream under torchft.

The data pipeline's schedule is global: one ordered stream of samples, cut into global
batches of `world x batch_size` from a global position (runtime/data/schedule.py). Under
torchft the world changes with the quorum, so a rank reads as slot `replica_rank x group_size
+ group_rank` of a world of `participants x group_size`, starting where the last *committed*
step left the stream. A committed step moves that position on by one global batch of the
world it ran with; a discarded step (a group failed during it) does not, so its samples are
read again by whoever is in the next quorum. No sample is trained twice or skipped (within an
epoch: a short epoch tail is dropped, as in every run). torchft's own DistributedSampler
shards by a fixed replica count and is lossy when groups come and go (its docstring says so);
this keeps the exact stream instead.

The committed position is part of the state a healing group receives from its peer, so a
replacement group continues the stream where the others are. A step's micro-batches
(`step.grad_accum`) all read on from the step's first one; only the commit moves the position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline, SourceFactory
from runtime.data.schedule import SamplerState, Span

Layout = tuple[int, int]  # (this rank's slot, the world of this step)


class QuorumBatches:
    """This rank's batches, placed in the global stream by the current quorum."""

    def __init__(self, config: DataConfig, layout: Callable[[], Layout],
                 source: SourceFactory | None = None) -> None:
        """`source`: where the producers get samples (DataPipeline's: an auxiliary producer
        service, runtime.data.aux_producer.remote_source); None: the rank's own datasets."""
        self.config, self.layout, self.source = config, layout, source
        self.committed = SamplerState().to_dict()
        self.pending: dict[str, int] | None = None  # the position after the step in flight
        self.pipeline: DataPipeline | None = None
        self.running: Layout | None = None
        self.indices: list[int] = []  # the step's samples so far, every micro-batch
        self.spans: list[Span] = []  # the Span of every micro-batch handed out since `taken`

    def __iter__(self) -> QuorumBatches:
        return self

    def __next__(self) -> torch.Tensor:
        """The next batch of this step's layout (read after the quorum of the step formed)."""
        layout = self.layout()
        if self.pipeline is None or layout != self.running:
            self._restart(layout)  # a new quorum, or the first step after a discard or heal
        assert self.pipeline is not None
        batch = next(self.pipeline)
        self.pending = self.pipeline.state_dict()
        self.indices += _indices(batch)
        if self.pipeline.last_span is not None:
            self.spans.append(self.pipeline.last_span)
        return batch["input"] if isinstance(batch, dict) else batch

    def _restart(self, layout: Layout) -> None:
        self.close()
        slot, world = layout
        self.pipeline = DataPipeline(self.config, rank=slot, world_size=world,
                                     state=self.committed, source=self.source)
        self.running, self.pending, self.indices = layout, None, []

    def taken(self) -> list[Span]:
        """The spans of the batches handed out since the last call (a discarded step's are
        gone), for the sample ledger; cleared by the call."""
        spans, self.spans = self.spans, []
        return spans

    def commit(self) -> None:
        """The step's update was applied: its samples are trained, the stream moves on."""
        if self.pending is not None:
            self.committed, self.pending, self.indices = self.pending, None, []

    def discard(self) -> None:
        """The step was not committed: its samples go back to the stream."""
        self.pending, self.indices, self.spans = None, [], []
        self.close()

    def state_dict(self) -> dict[str, Any]:
        return dict(self.committed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a checkpoint's or a healing peer's committed position."""
        self.committed = SamplerState.from_dict(state).to_dict()
        self.pending, self.indices, self.spans = None, [], []
        self.close()

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        self.pipeline, self.running = None, None


def _indices(batch: Any) -> list[int]:
    """The dataset indices of a batch's samples, when the dataset gives them (`index`)."""
    found = batch.get("index") if isinstance(batch, dict) else None
    return [int(i) for i in found.reshape(-1).tolist()] if isinstance(found, torch.Tensor) else []
