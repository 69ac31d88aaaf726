"""The small student network of local runs and smoke tests."""

from __future__ import annotations

from torch import nn

from runtime.train.config import ModelSection


def build_model(config: ModelSection) -> nn.Module:
    """An MLP: `depth` hidden layers of `hidden_dim` with GELU."""
    layers: list[nn.Module] = []
    width = config.input_dim
    for _ in range(config.depth):
        layers += [nn.Linear(width, config.hidden_dim), nn.GELU()]
        width = config.hidden_dim
    layers.append(nn.Linear(width, config.output_dim))
    return nn.Sequential(*layers)
