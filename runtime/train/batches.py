"""Where a rank's batches come from: the seam the data loader pipeline plugs into.

With a `data` section, each rank runs the deterministic loader pipeline (runtime.data) and
takes the `input` of every batch. With none, each rank draws synthetic features from its
own seeded stream; the samples differ across ranks and steps and are reproducible from
`run.seed`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.distributed as dist

from runtime.data.loader import DataPipeline
from runtime.train.config import TrainConfig


def build_batches(config: TrainConfig, rank: int) -> Iterator[torch.Tensor]:
    """An endless iterator of input batches for `rank`."""
    if config.data is not None:
        world = dist.get_world_size() if dist.is_initialized() else 1
        return _inputs(DataPipeline(config.data, rank=rank, world_size=world))
    return _synthetic(config, rank)


def _inputs(pipeline: DataPipeline) -> Iterator[torch.Tensor]:
    with pipeline:
        for batch in pipeline:
            yield batch["input"] if isinstance(batch, dict) else batch


def _synthetic(config: TrainConfig, rank: int) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(config.run.seed * 1_000_003 + rank)
    shape = (config.model.batch_size, config.model.input_dim)
    while True:
        yield torch.randn(shape, generator=generator)
