"""A refreshable test service: weights `a` and `b`, both filled with the version number by the
tests' publisher. Ray workers import it as `tests.runtime_train.versioned:Versioned`."""

from __future__ import annotations

import os
import time

import torch

SIZE = 4096


class Versioned:
    """`read` looks at `a`, yields the GIL, then looks at `b`: if a version were applied in
    the middle of a request (not between two), the sums would differ."""

    def __init__(self, name: str = "") -> None:
        self.name, self.version = name or str(os.getpid()), 0
        self.a, self.b = torch.zeros(SIZE), torch.zeros(SIZE)

    def startup_check(self) -> None:
        """Nothing to load."""

    def handle(self, method: str, payload: dict) -> dict:
        a = float(self.a.sum())
        time.sleep(0.001)
        b = float(self.b.sum())
        return {"a": a, "b": b, "version": self.version, "worker": self.name}

    def load_weights(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        self.a, self.b, self.version = tensors["a"], tensors["b"], version


def weights(version: int) -> dict[str, torch.Tensor]:
    """What the tests publish as `version`."""
    return {"a": torch.full((SIZE,), float(version)), "b": torch.full((SIZE,), float(version))}


def consistent(reply: dict) -> bool:
    """Both weights of one version, and the version the service says it has."""
    return bool(reply["a"] == reply["b"] == reply["version"] * SIZE)
