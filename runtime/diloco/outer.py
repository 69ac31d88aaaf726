"""The synchroniser's state: the shared weights, the outer optimizer over them, and their
checkpoints.

The weights are one flat tensor, so the outer optimizer is one `torch.optim.SGD` over one
parameter; SGD with (Nesterov) momentum works element by element, so this is the same update
as one per model parameter. The pseudo-gradient is the shared weights minus the mean of the
learners' snapshots (the DiLoCo paper's outer gradient, and torchft's `DiLoCo`), set as the
parameter's gradient before the optimizer steps.
"""

from __future__ import annotations

import logging
from typing import Any

import fsspec
import torch

from runtime.checkpoint.storage import CheckpointStore
from runtime.diloco.config import OuterOptimizer

log = logging.getLogger(__name__)
STATE_FILE = "outer.pt"


class OuterState:
    """The shared weights after `round` merges, and the outer optimizer's momentum."""

    def __init__(self, config: OuterOptimizer) -> None:
        self.config = config
        self.round = 0
        self.params: torch.nn.Parameter | None = None
        self.optimizer: torch.optim.SGD | None = None

    def adopt(self, weights: torch.Tensor) -> None:
        """Start from a learner's weights (the experiment's first join)."""
        self.params = torch.nn.Parameter(weights.detach().clone())
        outer = self.config
        self.optimizer = torch.optim.SGD([self.params], lr=outer.lr, momentum=outer.momentum,
                                         nesterov=outer.nesterov)

    @property
    def weights(self) -> torch.Tensor:
        assert self.params is not None
        return self.params.detach()

    def step(self, mean: torch.Tensor) -> None:
        """One outer step from the mean of this round's snapshots."""
        assert self.params is not None and self.optimizer is not None
        self.params.grad = self.params.detach() - mean
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.round += 1

    def state_dict(self) -> dict[str, Any]:
        assert self.optimizer is not None
        return {"round": self.round, "weights": self.weights.clone(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.adopt(state["weights"])
        assert self.optimizer is not None
        self.optimizer.load_state_dict(state["optimizer"])
        self.round = int(state["round"])


class OuterStore:
    """Outer checkpoints under one folder or fsspec URI: one committed directory per round
    (the training checkpoints' layout, `runtime.checkpoint.storage`)."""

    def __init__(self, uri: str, keep_last: int) -> None:
        self.store = CheckpointStore(uri)
        self.keep_last = keep_last

    def save(self, state: OuterState) -> None:
        self.store.clear(state.round)
        self.store.fs.makedirs(self._folder(state.round), exist_ok=True)
        with fsspec.open(f"{self.store.step_uri(state.round)}/{STATE_FILE}", "wb") as handle:
            torch.save(state.state_dict(), handle)
        self.store.commit(state.round, {"kind": "diloco-outer"})
        self.store.prune(self.keep_last)

    def restore(self, state: OuterState) -> bool:
        """Load the latest committed round into `state`; False when there is none."""
        latest = self.store.latest()
        if latest is None:
            return False
        with fsspec.open(f"{self.store.step_uri(latest)}/{STATE_FILE}", "rb") as handle:
            state.load_state_dict(torch.load(handle, weights_only=True))
        log.info("outer state restored from %s (round %d)", self.store.step_uri(latest), latest)
        return True

    def _folder(self, round_: int) -> str:
        _, path = fsspec.core.url_to_fs(self.store.step_uri(round_))
        return str(path)
