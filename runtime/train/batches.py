"""Where a rank's batches come from, and how far it has read (which goes into checkpoints).

With a `data` section, each rank runs its own deterministic loader pipeline (runtime.data,
seed §5.5) and takes the `input` of every batch. With none, each rank draws synthetic
features; batch `i` of rank `r` is a pure function of (`run.seed`, `r`, `i`), so resuming
only needs the count of batches read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import torch
import torch.distributed as dist

from runtime.data.loader import DataPipeline, SourceFactory
from runtime.diloco.config import learner_shard
from runtime.train.config import TrainConfig


class BatchSource(Iterator[torch.Tensor], Protocol):
    """An endless stream of input batches whose position is a small state dict."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class PipelineBatches:
    """The `input` of every batch of this rank's DataPipeline."""

    def __init__(self, pipeline: DataPipeline) -> None:
        self.pipeline = pipeline

    def __iter__(self) -> PipelineBatches:
        return self

    def __next__(self) -> torch.Tensor:
        batch = next(self.pipeline)
        return batch["input"] if isinstance(batch, dict) else batch

    def state_dict(self) -> dict[str, Any]:
        return self.pipeline.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pipeline.load_state_dict(state)

    def close(self) -> None:
        self.pipeline.close()


class SyntheticBatches:
    """Seeded random features, one generator seed per (run seed, rank, batch index)."""

    def __init__(self, config: TrainConfig, rank: int) -> None:
        self.seed = (config.run.seed * 1_000_003 + rank) * 1_000_003
        self.shape = (config.model.batch_size, config.model.input_dim)
        self.read = 0

    def __iter__(self) -> SyntheticBatches:
        return self

    def __next__(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed + self.read)
        self.read += 1
        return torch.randn(self.shape, generator=generator)

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.read}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.read = int(state["batches"])

    def close(self) -> None:
        """Nothing to release."""


def build_batches(
    config: TrainConfig, rank: int, source: SourceFactory | None = None
) -> BatchSource:
    """This rank's batch stream, positioned at the start (a checkpoint may move it); a DiLoCo
    learner's ranks read their learner's shard (`runtime.diloco.config.learner_shard`).
    `source`: where the producers get samples (DataPipeline's `source`)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank, world = learner_shard(config.diloco, rank, world)
    if config.data is None:
        return SyntheticBatches(config, rank)
    return PipelineBatches(DataPipeline(config.data, rank=rank, world_size=world,
                                        source=source))
