"""One optimizer step of a rank, and what logged steps report (seed §5.4: the distributed
program every rank runs)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import ray.train.torch
import torch
import torch.distributed as dist

from runtime.run.batches import BatchSource
from runtime.run.config import TrainConfig
from runtime.run.progress import ProgressRecorder
from runtime.tasks.base import Task
from runtime.train.evaluate import on_device
from runtime.train.loggers import MetricLogger
from runtime.train.telemetry import RankTelemetry

log = logging.getLogger(__name__)
Speaker = Callable[[], ProgressRecorder | None]  # the recorder while this rank speaks


@dataclass(frozen=True)
class Taken:
    """One optimizer step of this rank: its mean loss, and the samples and targets (tokens
    or samples, the task's unit) of its micro-batches."""

    loss: torch.Tensor
    samples: int
    targets: int


class Stepper:
    """One optimizer step: `step.grad_accum` micro-batches, their gradients summed (synced
    once, on the last: FSDP2's set_requires_gradient_sync), clipped, then applied. Each batch
    is drawn after zero_grad, where torchft forms the step's quorum, which places this rank
    in the sample stream."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, task: Task, batches: BatchSource,
                 telemetry: RankTelemetry | None) -> None:
        self.model, self.optimizer, self.task, self.batches = model, optimizer, task, batches
        self.telemetry = telemetry
        self.accum, self.clip = config.step.grad_accum, config.step.clip_grad_norm
        self.device = ray.train.torch.get_device()

    def __call__(self) -> Taken:
        self.optimizer.zero_grad()
        total, samples, targets = torch.zeros(()), 0, 0
        for micro in range(self.accum):
            _sync_gradients(self.model, micro == self.accum - 1)
            batch = on_device(self.device, next(self.batches))
            out = self.task.loss(self.model, batch)
            if self.telemetry is not None and micro == self.accum - 1:
                self.telemetry.before_backward()
            (out.loss / self.accum).backward()
            total += out.loss.detach().float().cpu()
            samples, targets = samples + _batch_size(batch), targets + out.targets
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        return Taken(total / self.accum, samples, targets)


def _sync_gradients(model: torch.nn.Module, sync: bool) -> None:
    """Reduce gradients on this micro-batch's backward only when `sync` (FSDP2)."""
    setter = getattr(model, "set_requires_gradient_sync", None)
    if setter is not None:
        setter(sync)


def _batch_size(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    return len(batch)


class Meter:
    """Logged steps: the loss and targets of every rank since the last logged step, averaged
    over ranks in one collective, recorded by the rank that speaks for the run and handed to
    the metric loggers."""

    def __init__(self, config: TrainConfig, speaker: Speaker, task: Task,
                 loggers: Loggers) -> None:
        self.run, self.speaker, self.task, self.loggers = config.run, speaker, task, loggers
        self.tp = config.layout.tp  # a tensor-parallel group trains its tokens once
        self.targets = 0

    def step(self, step: int, taken: Taken) -> None:
        self.targets += taken.targets
        if step % self.run.log_every and step != self.run.steps:
            return
        figures = torch.tensor([float(taken.loss), float(self.targets)], dtype=torch.float64)
        dist.all_reduce(figures)  # every rank joins the collective
        self.targets = 0
        mean = figures[0].item() / dist.get_world_size()
        metrics = self.task.metrics(mean)
        recorder = self.speaker()
        if recorder is not None:
            log.debug("step %d/%d loss %.5f", step, self.run.steps, mean)  # the driver prints
            recorder.step(step, mean, int(figures[1].item()) // self.tp, metrics)
            self.loggers.log(step, {"loss": mean, **metrics})


class Loggers:
    """Rank 0's metric loggers (none on other ranks)."""

    def __init__(self, loggers: list[MetricLogger]) -> None:
        self.loggers = loggers

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for logger in self.loggers:
            logger.log(step, metrics)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def rank_loggers(config: TrainConfig, rank: int) -> Loggers:
    if rank != 0:
        return Loggers([])
    return Loggers([section.build(f"loggers[{i}]") for i, section in enumerate(config.loggers)])
