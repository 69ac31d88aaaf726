"""The task protocol, and what the training loop gives a task when a rank starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from runtime.aux.client import ServiceHandle
from runtime.errors import ConfigError


@dataclass(frozen=True)
class TaskContext:
    """A rank as a task sees it: the run's auxiliary services and where this rank stands."""

    run_id: str
    rank: int  # over every replica group
    ranks: int
    lead: bool  # the rank that speaks for the run (pushes weight refreshes)
    report_interval_s: float = 1.0
    services: dict[str, ServiceHandle] = field(default_factory=dict)
    bytes_per_token: float | None = None  # of the training data, where its datasets say


@dataclass(frozen=True)
class StepLoss:
    """The loss of one micro-batch, and how many targets (tokens or samples) it averages."""

    loss: torch.Tensor
    targets: int


class Task(Protocol):
    """A learning problem. Every method but `loss` runs outside the step."""

    unit: str  # what `targets` counts: "tokens" or "samples" (throughput's unit)
    loss_unit: str  # what the loss measures: "nats/token", "mse"

    def check(self, model: nn.Module) -> None:
        """Raise contract_error(...) when `model` (built on the meta device) does not meet the
        task's contract; called before any rank starts."""
        ...

    def start(self, context: TaskContext) -> None:
        """Connect to what the task needs on this rank (a teacher service)."""
        ...

    def loss(self, model: nn.Module, batch: Any) -> StepLoss:
        """The mean loss of one micro-batch."""
        ...

    def metrics(self, loss: float) -> dict[str, float]:
        """What a mean loss means in this task's units (bits per byte, ...)."""
        ...

    def close(self) -> None:
        """Release what `start` opened."""
        ...


def contract_error(expected: str, got: str) -> ConfigError:
    """The model does not give what the task needs (shape, dtype)."""
    return ConfigError("model._target_", f"does not meet the task's contract: expected "
                                         f"{expected}, got {got}")


def meta_output(model: nn.Module, example: torch.Tensor) -> torch.Tensor:
    """The model's output for `example`, computed on the meta device (shapes only, no
    memory: a 70B model checks in milliseconds); errors are contract errors."""
    try:
        with torch.no_grad():
            return model(example.to("meta"))
    except Exception as error:
        raise contract_error(f"a forward pass on {_shape(example)} {example.dtype}",
                            f"{type(error).__name__}: {error}") from error


def _shape(tensor: torch.Tensor) -> str:
    return "[" + ", ".join(str(n) for n in tensor.shape) + "]"


def shape_of(value: object) -> str:
    """A tensor's shape as the contract writes it, or the value's type."""
    return _shape(value) if isinstance(value, torch.Tensor) else type(value).__name__
