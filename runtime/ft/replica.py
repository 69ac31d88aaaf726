"""What the training loop asks of fault tolerance, and its disabled form.

The loop wraps its model and optimizer, takes its batches and counts its steps through a
`Replica`. `NoReplica` (fault tolerance off) is plain Ray Train data parallelism: every step
commits. A torchft replica group (`runtime.ft.group`, imported only when enabled) may
discard a step when a group fails during it, and heals a group that is behind from a peer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import ray.train.torch
import torch
from torch import nn

from runtime.data.loader import SourceFactory
from runtime.ft.origin import Origin, resumed
from runtime.parallel.layout import lay_out
from runtime.run.batches import BatchSource, build_batches
from runtime.run.config import TrainConfig


@dataclass(frozen=True)
class ReplicaSpec:
    """What the driver tells the workers of one replica group."""

    index: int  # the group's place among the run's replica groups
    lighthouse: str  # the driver's torchft Lighthouse, http://host:port


class Replica(Protocol):
    """A rank's view of its replica group; a context manager around the whole training."""

    def model(self, module: nn.Module) -> nn.Module:
        """The model as it trains: wrapped for gradient averaging across its peers."""
        ...

    def optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer the loop steps (checkpoints hold the one given)."""
        ...

    def batches(self, config: TrainConfig, rank: int,
                source: SourceFactory | None = None) -> BatchSource:
        """This rank's batches; `source`: where its producers get samples (an auxiliary
        producer service's remote_source), None: the rank's own datasets."""
        ...

    def resume(self, state: Any, done: int) -> int:
        """The run resumed at step `done` with `state` (a TrainState); the step to go on from."""
        ...

    def steps(self, done: int, total: int) -> Iterator[int]:
        """Step attempts until `total` steps are committed."""
        ...

    def committed(self, attempt: int) -> int | None:
        """After an attempt: the step it committed, or None when it was discarded."""
        ...

    def origin(self) -> Origin:
        """How this incarnation got its weights; final from its first committed step on."""
        ...

    def leads(self) -> bool:
        """Whether this rank speaks for the run now (records progress)."""
        ...

    def replica_group(self) -> int:
        """This rank's replica group now: 0 saves checkpoints (seed §7.1)."""
        ...

    def __enter__(self) -> Replica: ...

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: object) -> bool | None: ...


class NoReplica:
    """Fault tolerance off: one worker group laid out as the layout says, every step
    commits."""

    def __init__(self, config: TrainConfig) -> None:
        self.layout = config.layout
        self.start = Origin("fresh", 0)

    def model(self, module: nn.Module) -> nn.Module:
        """On this rank's device, laid out on the mesh (runtime.parallel: DDP, FSDP2, HSDP,
        tensor parallelism)."""
        return lay_out(module, self.layout, ray.train.torch.get_device())

    def optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer itself."""
        return optimizer

    def batches(self, config: TrainConfig, rank: int,
                source: SourceFactory | None = None) -> BatchSource:
        """The rank's own slice of the stream."""
        return build_batches(config, rank, source)

    def resume(self, state: Any, done: int) -> int:
        """Nothing to tell anyone."""
        self.start = resumed(done)
        return done

    def steps(self, done: int, total: int) -> Iterator[int]:
        """Every step after `done`."""
        return iter(range(done + 1, total + 1))

    def committed(self, attempt: int) -> int | None:
        """Always the attempt."""
        return attempt

    def origin(self) -> Origin:
        """A checkpoint's step, or fresh."""
        return self.start

    def leads(self) -> bool:
        """Rank 0, the only one with a recorder, always speaks for the run."""
        return True

    def replica_group(self) -> int:
        """The only group."""
        return 0

    def __enter__(self) -> NoReplica:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: object) -> None:
        return None


def quiet_torchft() -> None:
    """torchft's native side logs every quorum and commit at INFO on stderr; its logger reads
    RUST_LOG once, when torchft is first imported. Keep warnings unless the user chose."""
    os.environ.setdefault("RUST_LOG", "warn")


def replica_for(config: TrainConfig, run_id: str, spec: ReplicaSpec | None) -> Replica:
    """This rank's replica: a torchft replica group when the driver gave it one."""
    if spec is None:
        return NoReplica(config)
    quiet_torchft()
    from runtime.ft.group import ReplicaGroup  # torchft only when fault tolerance is on

    return ReplicaGroup(config, run_id, spec.index, spec.lighthouse)
