"""Held-out loss: every `eval.every_steps`, the first `eval.batches` batches of each rank's
slice of `eval.data` (the same ones each time: the pipeline rewinds), averaged over ranks,
shown by the driver and given to the metric loggers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from runtime.parallel.apply import evaluation
from runtime.run.batches import BatchSource, build_batches
from runtime.run.config import TrainConfig
from runtime.run.progress import ProgressRecorder
from runtime.tasks.base import Task

START = {"epoch": 0, "offset": 0}  # the schedule's first sample (runtime.data.schedule)


class Evaluator:
    """A step hook; does nothing when `eval.every_steps` is 0."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module, task: Task, rank: int,
                 device: torch.device, speaker: Callable[[], ProgressRecorder | None],
                 log: Callable[[int, Mapping[str, float]], None]) -> None:
        """`speaker`: the recorder while this rank speaks for the run, else None."""
        section = config.eval
        self.every, self.count = section.every_steps, section.batches
        self.model, self.task, self.device = model, task, device
        self.speaker, self.log = speaker, log
        self.batches: BatchSource | None = None
        if self.every and section.data is not None:
            self.batches = build_batches(config, rank, data=section.data)

    def after_step(self, step: int) -> None:
        if self.batches is None or step % self.every:
            return
        mean = self.loss(self.batches)
        metrics = {f"eval_{name}": value for name, value in self.task.metrics(mean).items()}
        recorder = self.speaker()
        if recorder is not None:
            shown = "".join(f"  {value:.4f} {name}" for name, value in metrics.items())
            recorder.notice(f"eval at step {step}: loss {mean:.5f} "
                                 f"{self.task.loss_unit}{shown}")
            self.log(step, {"eval_loss": mean, **metrics})

    def loss(self, batches: BatchSource) -> float:
        """The mean loss of `count` batches from the start, over every rank."""
        batches.load_state_dict(dict(START))
        total = torch.zeros((), dtype=torch.float64)
        with evaluation(self.model):
            for _ in range(self.count):
                batch = on_device(self.device, next(batches))
                total += float(self.task.loss(self.model, batch).loss)
        dist.all_reduce(total)
        return total.item() / (self.count * dist.get_world_size())

    def close(self) -> None:
        if self.batches is not None:
            self.batches.close()


def on_device(device: torch.device, batch: Any) -> Any:
    """The batch's tensors on the model's device (a copy only where it is elsewhere)."""
    if isinstance(batch, dict):
        return {key: on_device(device, value) for key, value in batch.items()}
    return batch.to(device, non_blocking=True) if isinstance(batch, torch.Tensor) else batch
