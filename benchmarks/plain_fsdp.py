"""What a user would otherwise write: the same training as a training config, in plain torch.

The model (runtime.models.transformer.Transformer with the config's `model` keywords), its
data (the first dataset's TokenWindows through a torch DataLoader with a
DistributedSampler), FSDP2 as the driver lays it out on CPU (`fully_shard` per block, then
the root; float32), AdamW with the config's keywords, its warm-up/cosine schedule, gradient
clipping, batch and sequence length. No telemetry, no checkpoints, no Ray. The sizes come
from the composed YAML, so both sides of benchmarks/train.py train the same thing.

    .venv/bin/torchrun --nproc-per-node 2 benchmarks/plain_fsdp.py examples/train/tiny.yaml \
        [key=value ...]

Rank 0 prints one JSON line last: `{"first_step_wall": ..., "step_walls": [...],
"tokens_per_step": ...}`, the wall-clock time (time.time()) at which each step ended.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from runtime.data.tokens import TokenWindows
from runtime.models.transformer import Transformer
from runtime.run.config import TrainConfig
from runtime.train.compose import load_config
from runtime.train.schedules import warmup_cosine


def _model(config: TrainConfig) -> torch.nn.Module:
    torch.manual_seed(config.run.seed)
    model = Transformer(**config.model.kwargs)
    for block in model.layers.values():
        fully_shard(block)
    fully_shard(model)
    return model


def _batches(config: TrainConfig) -> DataLoader[torch.Tensor]:
    assert config.data is not None
    source = config.data.datasets[0]
    # TokenWindows is map-style (__len__, __getitem__) without subclassing torch's Dataset.
    dataset = cast("Dataset[torch.Tensor]", TokenWindows(**source.kwargs))
    sampler: DistributedSampler[torch.Tensor] = DistributedSampler(
        dataset, seed=config.data.seed, shuffle=config.data.shuffle, drop_last=True)
    return DataLoader(dataset, batch_size=config.data.batch_size, sampler=sampler,
                      num_workers=config.data.producers, drop_last=True, persistent_workers=True)


def _optimizer(config: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), **config.optim.kwargs)


def train(config: TrainConfig) -> list[float]:
    """The wall time at which each optimizer step ended."""
    model = _model(config)
    optimizer = _optimizer(config, model)
    schedule = warmup_cosine(optimizer, **(config.lr_schedule.kwargs if config.lr_schedule
                                            else {}))
    clip = config.step.clip_grad_norm
    walls: list[float] = []
    loader = iter(_batches(config))
    for _ in range(config.run.steps):
        batch = next(loader)
        optimizer.zero_grad()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
        walls.append(time.time())
        if len(walls) % config.run.log_every == 0 and dist.get_rank() == 0:
            print(f"step {len(walls)}/{config.run.steps}  loss {loss.item():.5f}", flush=True)
    return walls


def main(argv: list[str]) -> None:
    dist.init_process_group("gloo")
    config = load_config(Path(argv[0]), argv[1:])
    try:
        walls = train(config)
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        assert config.data is not None
        tokens = config.data.batch_size * config.data.datasets[0].kwargs["seq_len"] * \
            int(os.environ["WORLD_SIZE"])
        print(json.dumps({"first_step_wall": walls[0], "step_walls": walls,
                          "tokens_per_step": tokens}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
