"""Where a rank's batches come from, and how far it has read (which goes into checkpoints).

Each rank runs its own deterministic loader pipeline (runtime.data, seed §5.5) over the
`data` section and hands the task every collated batch as it is (a tensor, or a dict of
tensors). A DiLoCo learner's ranks read their learner's shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch.distributed as dist

from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline, SourceFactory
from runtime.data.schedule import Span
from runtime.diloco.config import learner_shard
from runtime.errors import ConfigError
from runtime.run.config import TrainConfig


class BatchSource(Iterator[Any], Protocol):
    """An endless stream of batches whose position is a small state dict."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def taken(self) -> list[Span]:
        """The spans of the batches handed out since the last call, one per micro-batch, in
        order (the sample ledger's record of a step); cleared by the call."""
        ...

    def close(self) -> None: ...


class PipelineBatches:
    """Every batch of this rank's DataPipeline."""

    def __init__(self, pipeline: DataPipeline) -> None:
        self.pipeline = pipeline
        self.spans: list[Span] = []

    def __iter__(self) -> PipelineBatches:
        return self

    def __next__(self) -> Any:
        batch = next(self.pipeline)
        assert self.pipeline.last_span is not None  # set by every batch
        self.spans.append(self.pipeline.last_span)
        return batch

    def taken(self) -> list[Span]:
        spans, self.spans = self.spans, []
        return spans

    def state_dict(self) -> dict[str, Any]:
        return self.pipeline.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pipeline.load_state_dict(state)
        self.spans = []  # a checkpoint's position: what was read before it is not this run's

    def close(self) -> None:
        self.pipeline.close()


def training_data(config: TrainConfig) -> DataConfig:
    """The `data` section, which training needs."""
    if config.data is None:
        raise ConfigError("data", "required to train: the datasets every rank reads (see "
                                  "examples/train/*.yaml)")
    return config.data


def build_batches(
    config: TrainConfig, rank: int, source: SourceFactory | None = None,
    data: DataConfig | None = None,
) -> BatchSource:
    """This rank's batch stream of `data` (default: the training data), positioned at the
    start (a checkpoint may move it); a DiLoCo learner's ranks read their learner's shard
    (`runtime.diloco.config.learner_shard`); the ranks of a tensor-parallel group share one
    slot of the stream. `source`: where the producers get samples
    (DataPipeline's `source`)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    slot, slots = data_slot(config, rank, world)
    return PipelineBatches(DataPipeline(data or training_data(config), rank=slot,
                                        world_size=slots, source=source))


def data_slot(config: TrainConfig, rank: int, world: int) -> tuple[int, int]:
    """Rank `rank`'s slot of the global sample stream, and the stream's slots per step. The
    ranks of one tensor-parallel group (innermost in the mesh) share a slot; a DiLoCo
    learner's ranks read their learner's shard."""
    tp = config.layout.tp
    return learner_shard(config.diloco, rank // tp, max(world // tp, 1))
