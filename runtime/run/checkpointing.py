"""Checkpointing as the driver and the train loop see it (seed §7.1).

The driver makes local paths absolute (Ray Train workers run in a directory of their own)
and picks the checkpoint to resume from at start. A worker group that Ray Train restarts
after a failure (`run.max_failures`) resumes from the newest checkpoint its own run has
committed since, which its rank 0 looks up and shares, so every rank loads the same one. The
loop talks to a CheckpointManager: resume at start, save after steps, close at the end;
every call is a no-op when checkpointing is off. Only the lowest replica group saves, and
its rank 0 also checkpoints the auxiliary services whose implementation keeps state.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch.distributed as dist
from ray.exceptions import RayError

from runtime.aux.coordinator import AuxCoordinator
from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer, CheckpointHook
from runtime.checkpoint.storage import CheckpointError, CheckpointStore
from runtime.checkpoint.training import TrainState
from runtime.run.config import TrainConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePoint:
    """The committed checkpoint a run continues from."""

    uri: str
    step: int


def enabled(config: TrainConfig) -> CheckpointConfig | None:
    """The checkpoint section when checkpointing is on."""
    section = config.checkpoint
    return section if section is not None and section.enabled else None


def localize(config: TrainConfig) -> TrainConfig:
    """The config with local checkpoint paths made absolute, relative to this process."""
    section = config.checkpoint
    if section is None:
        return config
    update = {"uri": _absolute(section.uri)}
    if section.resume_from not in (None, "latest"):
        update["resume_from"] = _absolute(section.resume_from)
    return config.model_copy(update={"checkpoint": section.model_copy(update=update)})


def _absolute(uri: str) -> str:
    return uri if "://" in uri else str(Path(uri).expanduser().resolve())


def find_resume_point(config: TrainConfig) -> ResumePoint | None:
    """`checkpoint.resume_from` resolved now: the latest committed step, an explicit one,
    or None for a fresh start."""
    section = enabled(config)
    if section is None:
        return None
    uri = CheckpointStore(section.uri).resolve(section.resume_from)
    if uri is None:
        return None
    return ResumePoint(uri, int(os.path.basename(uri).removeprefix("step-")))


def restart_point(
    config: TrainConfig, run_id: str, picked: ResumePoint | None
) -> ResumePoint | None:
    """Where this worker group starts: the newest checkpoint its run committed (it is a
    restart after a failure), else the driver's pick. Rank 0 decides for the whole group."""
    section = enabled(config)
    if section is None:
        return picked
    shared: list[ResumePoint | None] = [picked]
    if not dist.is_initialized() or dist.get_rank() == 0:
        store = CheckpointStore(section.uri)
        step = store.latest_of(run_id)
        if step is not None:
            shared[0] = ResumePoint(store.step_uri(step), step)
    if dist.is_initialized():
        dist.broadcast_object_list(shared, src=0)
    return shared[0]


def committed_steps(config: TrainConfig) -> list[int]:
    """The committed steps under `checkpoint.uri`, oldest first."""
    section = enabled(config)
    if section is None:
        return []
    return sorted(step for step, ok in CheckpointStore(section.uri).steps().items() if ok)


class CheckpointManager:
    """What the train loop calls; a disabled manager does nothing."""

    def __init__(
        self,
        config: CheckpointConfig | None,
        state: TrainState,
        hooks: Sequence[CheckpointHook] = (),
        run: str | None = None,
        replica_group: Callable[[], int] = lambda: 0,
    ) -> None:
        """`replica_group`: this rank's replica group now (0: the one that saves)."""
        self.checkpointer = (
            Checkpointer(config, hooks=hooks, run=run, replica_group=replica_group())
            if config is not None and config.enabled else None
        )
        self.state = {"train": state}
        self.replica_group = replica_group

    def resume(self, point: ResumePoint | None) -> int:
        """Load `point` into the training state (resharded by DCP); the last step done."""
        if self.checkpointer is None or point is None:
            return 0
        step = self.checkpointer.load(self.state, resume_from=point.uri)
        if self.checkpointer.rank == 0:
            log.info("resumed from %s at step %s", point.uri, step)
        return step or 0

    def after_step(self, step: int) -> bool:
        """Surface a failed background write, then save when `step` is due; whether it saved."""
        if self.checkpointer is None:
            return False
        self.checkpointer.check()
        self.checkpointer.replica_group = self.replica_group()
        saved = self.checkpointer.maybe_save(step, self.state)
        if saved and self.checkpointer.rank == 0:
            uri = self.checkpointer.config.uri
            log.info("step %d: checkpoint staged, writing under %s", step, uri)
        return saved

    def close(self) -> None:
        """Wait for the write in flight; raise if it failed."""
        if self.checkpointer is not None:
            self.checkpointer.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.close()
            return
        try:  # the error already on its way out is the one to report
            self.close()
        except CheckpointError as error:
            log.warning("while stopping after an error: %s", error)


class AuxServiceHook:
    """One auxiliary service's part of a checkpoint: worker i saves under `<uri>/worker-i`."""

    def __init__(self, name: str, workers: Sequence[Any]) -> None:
        self.name, self.workers = name, list(workers)

    def save(self, step: int, uri: str) -> None:
        """Every worker saves its state for `step`."""
        self._each("save_checkpoint", uri)

    def load(self, step: int, uri: str) -> None:
        """Every worker restores the state saved under `uri`."""
        self._each("load_checkpoint", uri)

    def _each(self, method: str, uri: str) -> None:
        calls = [
            getattr(worker, method).remote(f"{uri}/worker-{index}")
            for index, worker in enumerate(self.workers)
        ]
        try:
            ray.get(calls)
        except RayError as error:
            raise CheckpointError(f"aux service {self.name!r}: {method} failed: {error}") from error


class SaveOnly:
    """An auxiliary service's hook as a torchft replica group holds it: the group saves the
    service's state, but never restores it. The services outlive any one group, so a
    replacement group must not roll them back; the driver restores them at the start."""

    def __init__(self, hook: CheckpointHook) -> None:
        self.hook, self.name = hook, hook.name

    def save(self, step: int, uri: str) -> None:
        """The service saves its state for `step`."""
        self.hook.save(step, uri)

    def load(self, step: int, uri: str) -> None:
        """Nothing: see the class."""


def restore_services(hooks: Sequence[CheckpointHook], point: ResumePoint | None) -> None:
    """The driver's restore of the services' state saved with `point` (torchft runs)."""
    if point is None:
        return
    for hook in hooks:
        hook.load(point.step, f"{point.uri}/aux/{hook.name}")


def aux_hooks(coordinator: AuxCoordinator | None) -> list[AuxServiceHook]:
    """Hooks for the services of this run that keep state (none off rank 0)."""
    if coordinator is None:
        return []
    return [
        AuxServiceHook(name, workers)
        for name, workers in coordinator.actors.items()
        if workers and ray.get(workers[0].checkpointable.remote())
    ]
