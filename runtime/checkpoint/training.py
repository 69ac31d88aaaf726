"""The training state a rank checkpoints: model, optimizer, LR schedule, loader position
and RNG.

Model and optimizer go through DCP's state_dict helpers, which give fully qualified names
and sharded tensors (DTensor) that do not depend on the DDP/FSDP2/TP wrapping, so a
checkpoint loads into another layout (DCP reshards on load: 2 -> 4 ranks, FSDP <-> HSDP).
The loader's position is a global sample offset (runtime.data.schedule), the same on every
rank, so it too holds on a new world size. The RNG is rank 0's torch generator state: every
rank restores it (the built-in models draw no random numbers while training; a model with
dropout would see rank 0's stream).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.optim.lr_scheduler import LRScheduler


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
        schedule: LRScheduler | None = None,
    ) -> None:
        self.model, self.optimizer, self.loader = model, optimizer, loader
        self.schedule = schedule

    def state_dict(self) -> dict[str, Any]:
        model, optim = get_state_dict(self.model, self.optimizer)
        state: dict[str, Any] = {"model": model, "optim": optim,
                                 "rng": torch.get_rng_state()}
        if self.loader is not None:
            state["loader"] = self.loader.state_dict()
        if self.schedule is not None:
            state["schedule"] = self.schedule.state_dict()
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
        if self.schedule is not None and "schedule" in state:
            self.schedule.load_state_dict(state["schedule"])
        if "rng" in state:
            torch.set_rng_state(state["rng"])
