"""Learning-rate schedules for `lr_schedule._target_`: called with the optimizer first, they
return a torch LRScheduler that the loop steps once per committed optimizer step."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine(optimizer: torch.optim.Optimizer, warmup_steps: int = 0,
                  decay_steps: int = 1000, min_ratio: float = 0.1) -> LambdaLR:
    """Linear warm-up from 0 over `warmup_steps`, then cosine decay to `min_ratio` of the
    optimizer's learning rate at `decay_steps` (usually `${run.steps}`), flat after."""
    if warmup_steps < 0 or decay_steps < 1 or not 0 <= min_ratio <= 1:
        raise ValueError("allowed: warmup_steps >= 0, decay_steps >= 1, 0 <= min_ratio <= 1")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        span = max(decay_steps - warmup_steps, 1)
        progress = min((step - warmup_steps) / span, 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)
