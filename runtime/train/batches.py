"""Where a rank's batches come from: the seam the data loader pipeline plugs into.

With no `data` section, each rank draws synthetic features from its own seeded stream;
the samples differ across ranks and steps and are reproducible from `run.seed`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from runtime.errors import ConfigError
from runtime.train.config import TrainConfig


def build_batches(config: TrainConfig, rank: int) -> Iterator[torch.Tensor]:
    """An endless iterator of input batches for `rank`."""
    if config.data is not None:
        raise ConfigError(
            "data", "the loader pipeline is not wired into this driver yet; remove `data`"
        )
    return _synthetic(config, rank)


def _synthetic(config: TrainConfig, rank: int) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(config.run.seed * 1_000_003 + rank)
    shape = (config.model.batch_size, config.model.input_dim)
    while True:
        yield torch.randn(shape, generator=generator)
