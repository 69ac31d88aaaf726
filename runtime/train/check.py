"""What the driver checks before any rank starts, so that a wrong component is an error
naming its field, not a failure of every rank: each `_target_` imports and accepts its
section's keys, the model (built on the meta device: no memory, a 70B model in
milliseconds) meets the task's contract, and the layout fits the world."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from runtime.data.config import check_data
from runtime.errors import ConfigError
from runtime.parallel.mesh import MeshShape, mesh_shape
from runtime.run.batches import training_data
from runtime.run.config import TrainConfig
from runtime.tasks.base import Task


@dataclass(frozen=True)
class RunCheck:
    """What the checks learnt, for the driver's plan."""

    model: str  # the model's class and size
    mesh: MeshShape | None  # None before the world is known

    def lines(self) -> list[str]:
        return [self.model, *([self.mesh.explain()] if self.mesh else [])]


def check_run(config: TrainConfig, world_size: int | None = None,
              source: str = "config") -> RunCheck:
    """Check every component, and the layout on `world_size` ranks when given; a problem is
    a ConfigError from `source` (the config file)."""
    with _from(source):
        checked = _check(config)
    mesh = None if world_size is None else check_mesh(config, world_size, source)
    return RunCheck(checked.model, mesh)


def check_mesh(config: TrainConfig, world_size: int, source: str = "config") -> MeshShape:
    """The layout's mesh on `world_size` ranks (components need no second check)."""
    with _from(source):
        return _mesh(config, world_size)


@contextmanager
def _from(source: str) -> Iterator[None]:
    """A ConfigError without a source of its own is one of `source`."""
    try:
        yield
    except ConfigError as error:
        if error.source != "config":
            raise
        raise ConfigError(source=source, problems=error.problems) from error


def _check(config: TrainConfig) -> RunCheck:
    task: Task = config.task.build("task")
    with torch.device("meta"):
        model: nn.Module = config.model.build("model")
    task.check(model)
    config.optim.check("optim", "params")
    if config.lr_schedule is not None:
        config.lr_schedule.check("lr_schedule", "optimizer")
    for i, logger in enumerate(config.loggers):
        logger.check(f"loggers[{i}]")
    if config.tokenizer is not None:
        config.tokenizer.check("tokenizer")
    check_data(training_data(config))
    if config.eval.data is not None:
        check_data(config.eval.data)
    if config.layout.meta_init and not hasattr(model, "init_weights"):
        raise ConfigError("layout.meta_init", f"true: {config.model.target} has no "
                          "init_weights() to initialise it after sharding; allowed: false")
    if config.layout.tp > 1 and not hasattr(model, "apply_tensor_parallel"):
        raise ConfigError("layout.tp", f"{config.layout.tp}: {config.model.target} has no "
                          "tensor-parallel plan (apply_tensor_parallel); allowed: 1")
    return RunCheck(_describe(config, model), None)


def meta_init(config: TrainConfig) -> bool:
    """Whether ranks build the model on the meta device (`layout.meta_init`)."""
    chosen = config.layout.meta_init
    if chosen is not None:
        return chosen
    on_gpu = config.layout.gpus_per_worker > 0
    return on_gpu and hasattr(config.model.check("model"), "init_weights")


def _mesh(config: TrainConfig, world_size: int) -> MeshShape:
    """The mesh of one worker group: with torchft, of each replica group (FSDP2 / TP inside
    it, the groups the replicate dimension: runtime.ft.group)."""
    ft = config.fault_tolerance
    if ft.enabled:
        return mesh_shape(config.layout, world_size // ft.replica_groups)  # each group's
    shape = mesh_shape(config.layout, world_size)
    if config.diloco.enabled and (shape.dp_shard > 1 or shape.tp > 1):
        raise ConfigError("layout.dp_shard", f"{shape.explain()} in a DiLoCo learner: not "
                          "built yet (the outer step exchanges whole parameters); allowed: "
                          "dp_shard: 1 and tp: 1")
    return shape


def _describe(config: TrainConfig, model: nn.Module) -> str:
    params = sum(p.numel() for p in model.parameters())
    return f"model {config.model.target}: {params / 1e6:,.1f}M parameters"
