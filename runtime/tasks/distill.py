"""The toy task: regress a frozen teacher's outputs (knowledge distillation, mean squared
error). The teacher is an auxiliary service (`target_service`, seed §5.4) or, with none, a
local copy of the same encoder.

Contract: the model maps features FloatTensor[batch, input_dim] to FloatTensor[batch,
output_dim]; a batch is the features, or a dict holding them under `input`.

When the service takes weight refreshes (`refresh: true`), training owns the teacher's
weights: the lead rank pushes them before the first step, and every request asks for a
pushed version (>= 1), never the service's own initial weights.
"""

from __future__ import annotations

from typing import Any

import ray
import torch
import torch.nn.functional as F
from torch import nn

from runtime.aux.client import AuxClient
from runtime.aux.refresh import WeightPublisher
from runtime.aux.services import EncoderService
from runtime.fleet import monitor_name
from runtime.tasks.base import StepLoss, TaskContext, contract_error, meta_output, shape_of


class Distillation:
    """MSE against the teacher's `encode`."""

    unit, loss_unit = "samples", "mse"

    def __init__(self, input_dim: int = 32, output_dim: int = 8,
                 target_service: str | None = None, teacher_seed: int = 0) -> None:
        self.input_dim, self.output_dim = input_dim, output_dim
        self.target_service = target_service
        self.local = EncoderService(input_dim, output_dim, seed=teacher_seed)
        self.client: AuxClient | None = None
        self.publisher: WeightPublisher | None = None
        self.min_version = 0

    def check(self, model: nn.Module) -> None:
        out = meta_output(model, torch.zeros(2, self.input_dim))
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, self.output_dim):
            raise contract_error(f"outputs [2, {self.output_dim}] for features [2, "
                                 f"{self.input_dim}] (task.output_dim)", shape_of(out))

    def start(self, context: TaskContext) -> None:
        name = self.target_service
        if name is None:
            return
        handle = context.services[name]
        monitor = ray.get_actor(monitor_name(context.run_id))
        self.client = AuxClient(handle, context.rank,
                                lambda sample: monitor.record_client.remote(sample),
                                context.report_interval_s)
        if handle.refresh is not None:
            self.min_version = 1
            if context.lead:
                self.publisher = WeightPublisher(handle.refresh)
                self.publisher.publish({"w1": self.local.w1, "w2": self.local.w2})

    def loss(self, model: nn.Module, batch: torch.Tensor | dict[str, torch.Tensor]) -> StepLoss:
        x = batch["input"] if isinstance(batch, dict) else batch  # SyntheticFeatures' key
        return StepLoss(F.mse_loss(model(x), self._targets(x)), len(x))

    def _targets(self, x: torch.Tensor) -> Any:
        if self.client is None:
            return self.local.handle("encode", {"x": x})["y"]
        return self.client.call("encode", {"x": x}, min_version=self.min_version)["y"]

    def metrics(self, loss: float) -> dict[str, float]:
        """The loss says it all."""
        return {}

    def close(self) -> None:
        """Close the client's sockets, reporting the transfer times it still holds."""
        if self.client is not None:
            self.client.close()
        if self.publisher is not None:
            self.publisher.close()
