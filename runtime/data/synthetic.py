"""Small deterministic datasets and transforms for smoke runs, tests and benchmarks.

`SyntheticImages` + `augment` make a CPU-bound workload; `SlowStore` adds a per-sample
wait that stands in for the latency of remote storage (I/O-bound workload).
"""

from __future__ import annotations

import time

import torch


class SyntheticTokens:
    """`length` samples of `seq_len` token ids, a pure function of the index."""

    def __init__(self, length: int = 4096, seq_len: int = 64, vocab: int = 32000) -> None:
        self.length, self.seq_len, self.vocab = length, seq_len, vocab

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        tokens = torch.randint(self.vocab, (self.seq_len + 1,), generator=g)
        return {"index": torch.tensor(index), "input": tokens[:-1], "target": tokens[1:]}


class SyntheticImages:
    """`length` images of `size` x `size` RGB bytes with a label, a pure function of the index."""

    def __init__(self, length: int = 4096, size: int = 64) -> None:
        self.length, self.size = length, size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        image = torch.randint(256, (3, self.size, self.size), dtype=torch.uint8, generator=g)
        return {"index": torch.tensor(index), "image": image, "label": torch.tensor(index % 10)}


class SlowStore(SyntheticTokens):
    """SyntheticTokens whose every read waits `latency_ms`, like an object-store GET."""

    def __init__(self, latency_ms: float = 2.0, **kwargs: int) -> None:
        super().__init__(**kwargs)
        self.latency_s = latency_ms / 1000.0

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        time.sleep(self.latency_s)
        return super().__getitem__(index)


def augment(sample: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A random crop-and-flip plus a few convolutions: CPU work that uses the global RNG."""
    image = sample["image"].float() / 255.0
    if torch.rand(()) < 0.5:
        image = image.flip(-1)
    dx, dy = torch.randint(0, 9, (2,)).tolist()
    padded = torch.nn.functional.pad(image, (4, 4, 4, 4))
    image = padded[:, dy : dy + image.shape[1], dx : dx + image.shape[2]]
    kernel = torch.full((3, 1, 3, 3), 1.0 / 9.0)
    for _ in range(4):
        image = torch.nn.functional.conv2d(image[None], kernel, padding=1, groups=3)[0]
    return {**sample, "image": image}


class SyntheticFeatures:
    """`length` float feature vectors of size `dim` (key `input`), a pure function of the index."""

    def __init__(self, length: int = 4096, dim: int = 16) -> None:
        self.length, self.dim = length, dim

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        return {"index": torch.tensor(index), "input": torch.randn(self.dim, generator=g)}


def jitter(sample: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Gaussian noise on `input` from the global RNG: a random transform of SyntheticFeatures
    whose output depends on the per-sample seed only."""
    return {**sample, "input": sample["input"] + 0.1 * torch.randn(sample["input"].shape)}
