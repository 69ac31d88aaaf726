"""The training state a rank checkpoints: model, optimizer and loader progress.

Model and optimizer go through DCP's state_dict helpers, which give fully qualified names
that do not depend on the DDP/FSDP wrapper, so a checkpoint loads into another layout.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict


class Resumable(Protocol):
    """Anything whose progress is a small state dict (the data loader pipeline)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class TrainState:
    """A Stateful (in DCP's sense) bundle of what resuming a run needs."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        loader: Resumable | None = None,
    ) -> None:
        self.model, self.optimizer, self.loader = model, optimizer, loader

    def state_dict(self) -> dict[str, Any]:
        model, optim = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model, "optim": optim}
        if self.loader is not None:
            state["loader"] = self.loader.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
        if self.loader is not None and "loader" in state:
            self.loader.load_state_dict(state["loader"])
