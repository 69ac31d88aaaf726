"""What a producer does: fetch samples of the configured datasets and transform them."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from runtime.data.config import DataConfig
from runtime.errors import ConfigError


class SampleSource(Protocol):
    """The producer stage's work, local or on an auxiliary service."""

    def fetch(
        self, datasets: Sequence[int], indices: Sequence[int], seeds: Sequence[int]
    ) -> list[Any]:
        """Fetched and transformed samples, in the order asked."""
        ...


def load_callable(path: str, field: str) -> Callable[..., Any]:
    """Import `module:attr`; a missing module or attribute is a ConfigError on `field`."""
    module_name, _, attr = path.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(field, f"cannot import {path!r}: {exc}") from exc
    if not callable(target):
        raise ConfigError(field, f"{path!r} is not callable")
    return target


def build_datasets(config: DataConfig) -> list[Any]:
    """Instantiate every dataset of the mixture from its factory."""
    return [
        load_callable(d.factory, f"data.datasets[{i}].factory")(**d.kwargs)
        for i, d in enumerate(config.datasets)
    ]


def dataset_lengths(datasets: Sequence[Any]) -> list[int]:
    return [len(d) for d in datasets]


class LocalSource:
    """Fetch from datasets built in this process; seed the RNGs per sample so that random
    transforms are reproducible whichever producer runs them."""

    def __init__(self, config: DataConfig) -> None:
        self.datasets = build_datasets(config)
        self.transform = (
            load_callable(config.transform, "data.transform") if config.transform else None
        )

    def fetch(
        self, datasets: Sequence[int], indices: Sequence[int], seeds: Sequence[int]
    ) -> list[Any]:
        return [
            self._one(int(d), int(i), int(s))
            for d, i, s in zip(datasets, indices, seeds, strict=True)
        ]

    def _one(self, dataset: int, index: int, seed: int) -> Any:
        sample = self.datasets[dataset][index]
        if self.transform is None:
            return sample
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        return self.transform(sample)
