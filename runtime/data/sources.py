"""What a producer does: fetch samples of the configured datasets and transform them."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol, TypeAlias

import numpy as np
import torch

from runtime.components import build_callable, instantiate
from runtime.data.config import DataConfig

# Per-sample dataset numbers, indices and seeds: slices of the schedule's integer arrays.
IntSequence: TypeAlias = Sequence[int] | np.ndarray


class SampleSource(Protocol):
    """The producer stage's work, local or on an auxiliary service."""

    def fetch(
        self, datasets: IntSequence, indices: IntSequence, seeds: IntSequence
    ) -> list[Any]:
        """Fetched and transformed samples, in the order asked."""
        ...


def build_datasets(config: DataConfig) -> list[Any]:
    """Instantiate every dataset of the mixture from its `_target_` and keyword arguments."""
    return [instantiate(d, f"data.datasets[{i}]") for i, d in enumerate(config.datasets)]


def dataset_lengths(datasets: Sequence[Any]) -> list[int]:
    return [len(d) for d in datasets]


class LocalSource:
    """Fetch from datasets built in this process (or the `datasets` given); seed the RNGs per
    sample so that random transforms are reproducible whichever producer runs them."""

    def __init__(self, config: DataConfig, datasets: list[Any] | None = None) -> None:
        self.datasets = build_datasets(config) if datasets is None else datasets
        self.transform = (
            build_callable(config.transform, "data.transform") if config.transform else None
        )
        # Reads wait on storage, not the CPU: threads overlap them; transforms stay serial
        # on the producer's thread so that seeding the global RNGs per sample is safe.
        self.reads = ThreadPoolExecutor(config.io_threads) if config.io_threads > 1 else None

    def fetch(
        self, datasets: IntSequence, indices: IntSequence, seeds: IntSequence
    ) -> list[Any]:
        pairs = [(int(d), int(i)) for d, i in zip(datasets, indices, strict=True)]
        if self.reads is None:
            raw = [self.datasets[d][i] for d, i in pairs]
        else:
            raw = list(self.reads.map(lambda p: self.datasets[p[0]][p[1]], pairs))
        return [self._transform(sample, int(s)) for sample, s in zip(raw, seeds, strict=True)]

    def close(self) -> None:
        """Stop the read threads (before this process forks, say)."""
        if self.reads is not None:
            self.reads.shutdown()

    def _transform(self, sample: Any, seed: int) -> Any:
        if self.transform is None:
            return sample
        # torch.manual_seed would also seed every accelerator backend (~0.1 ms a call on
        # this machine, measured); the CPU generator is what a transform in a producer uses.
        torch.default_generator.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        return self.transform(sample)


@contextmanager
def as_a_producer() -> Iterator[None]:
    """Run a fetch outside a producer process with a producer's settings: one intra-op thread
    (a result may depend on the thread count); the caller's thread count and the global RNG
    states that the per-sample seeding replaces are restored afterwards."""
    threads = torch.get_num_threads()
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        np.random.set_state(states[2])
