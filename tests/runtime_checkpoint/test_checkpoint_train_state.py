"""TrainState: model, optimizer and loader progress resume together from one checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer
from runtime.checkpoint.training import TrainState
from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline

_DATA = DataConfig(
    datasets=[{"name": "f", "_target_": "runtime.data.synthetic.SyntheticFeatures"}],
    batch_size=8,
    start_method="fork",
)


def _parts(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(16, 4)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def _steps(model: torch.nn.Module, optim: torch.optim.Optimizer, pipe: DataPipeline, n: int):
    losses = []
    for _ in range(n):
        x = next(pipe)["input"]
        loss = model(x).pow(2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    return losses


def test_a_resumed_run_continues_exactly_like_the_uninterrupted_one(tmp_path: Path) -> None:
    ckpt = Checkpointer(CheckpointConfig(uri=str(tmp_path), interval_steps=3))
    model, optim = _parts(0)
    with DataPipeline(_DATA) as pipe:
        _steps(model, optim, pipe, 3)
        assert ckpt.maybe_save(3, {"train": TrainState(model, optim, pipe)})
        reference = _steps(model, optim, pipe, 4)
    ckpt.close()
    model, optim = _parts(1)  # a fresh process: other initial weights, empty optimizer
    with DataPipeline(_DATA) as pipe:
        assert ckpt.load({"train": TrainState(model, optim, pipe)}) == 3
        assert _steps(model, optim, pipe, 4) == reference
