"""Image classification.

Contract: the model maps images FloatTensor[batch, channels, height, width] to logits
FloatTensor[batch, num_classes]. A batch is a dict with `image` (uint8 pixels or floats;
uint8 is scaled to [0, 1]) and `label` (LongTensor[batch]), as the image datasets of
runtime.data give it. The loss is the mean cross-entropy in nats per image; `accuracy` of
the step's batch is not tracked (it needs a second collective), the loss is.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from runtime.tasks.base import StepLoss, TaskContext, contract_error, meta_output, shape_of


class ImageClassification:
    """Cross-entropy over `num_classes` for images of `channels` x `image_size`^2."""

    unit, loss_unit = "images", "nats/image"

    def __init__(self, num_classes: int, image_size: int, channels: int = 3) -> None:
        self.num_classes, self.image_size, self.channels = num_classes, image_size, channels

    def check(self, model: nn.Module) -> None:
        side = self.image_size
        out = meta_output(model, torch.zeros(2, self.channels, side, side))
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, self.num_classes):
            raise contract_error(f"logits [2, {self.num_classes}] for images [2, "
                                 f"{self.channels}, {side}, {side}]", shape_of(out))

    def start(self, context: TaskContext) -> None:
        """Nothing to connect."""

    def loss(self, model: nn.Module, batch: dict[str, Any]) -> StepLoss:
        images = batch["image"]
        if images.dtype == torch.uint8:
            images = images.float() / 255
        logits = model(images)
        return StepLoss(F.cross_entropy(logits.float(), batch["label"]), len(images))

    def metrics(self, loss: float) -> dict[str, float]:
        """The loss says it all."""
        return {}

    def close(self) -> None:
        """Nothing to release."""
