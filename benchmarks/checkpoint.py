"""Training stall per checkpoint: DCP async save (host staging) against a blocking DCP save.

The stall is the time the training loop spends inside `Checkpointer.save` (for async:
waiting for the previous write, staging into host memory and starting the writer). Between
checkpoints the loop runs real matrix multiplications as its training step.

    .venv/bin/python benchmarks/checkpoint.py [--mb 256] [--saves 3] [--step-s 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer


def _model_state(megabytes: int) -> dict[str, torch.Tensor]:
    per = 16 * (1 << 20) // 4  # 16 MiB float32 tensors, like the layers of a model
    return {f"layer{i}.weight": torch.randn(per) for i in range(max(1, megabytes // 16))}


def _train_step(work: torch.Tensor, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        work @ work


def _stalls(
    async_save: bool, state: dict[str, torch.Tensor], saves: int, step_s: float
) -> list[float]:
    work = torch.randn(256, 256)
    with tempfile.TemporaryDirectory(dir=".") as root:
        ckpt = Checkpointer(
            CheckpointConfig(uri=root, interval_steps=1, keep_last=2, async_save=async_save)
        )
        stalls = []
        for step in range(1, saves + 1):
            _train_step(work, step_s)
            for tensor in state.values():
                tensor.add_(1.0)  # the optimizer moves on between checkpoints
            start = time.perf_counter()
            ckpt.save(step, state)
            stalls.append(time.perf_counter() - start)
        ckpt.close()
    return stalls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="size of the model state")
    parser.add_argument("--saves", type=int, default=3, help="checkpoints per mode")
    parser.add_argument("--step-s", type=float, default=5.0, help="training time between saves")
    args = parser.parse_args()
    state = _model_state(args.mb)
    blocking = statistics.median(_stalls(False, state, args.saves, args.step_s))
    async_ = statistics.median(_stalls(True, state, args.saves, args.step_s))
    print(f"state: {args.mb} MiB in {len(state)} tensors, {args.saves} checkpoints per mode")
    print(f"blocking dcp.save stall per checkpoint: {blocking * 1000:8.1f} ms")
    print(f"async (host staging) stall:             {async_ * 1000:8.1f} ms")
    print(f"ratio async/blocking: {async_ / blocking:.3f} (target <= 0.20)")


if __name__ == "__main__":
    main()
