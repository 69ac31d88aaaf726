"""Small training runs for the fault-tolerance tests and benchmark: a local teacher (no
auxiliary services), a synthetic feature stream in order (sample i is dataset index i) read
through PacedFeatures, CPU ranks on gloo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime.run.config import TrainConfig, build_config

DATASET = "tests.runtime_ft.faults.PacedFeatures"


def config(folder: Path, *, pace_s: float = 0.0, kill_at: tuple[int, ...] = (),
           batch: int = 4, **sections: dict[str, Any]) -> TrainConfig:
    """A run whose sections are these defaults updated by `sections` (one level deep)."""
    folder.mkdir(parents=True, exist_ok=True)
    raw: dict[str, dict[str, Any]] = {
        "run": {"name": "ft", "steps": 20, "log_every": 1, "local_cpus": 8},
        "task": {"_target_": "runtime.tasks.distill.Distillation", "input_dim": 8,
                 "output_dim": 4},
        "model": {"_target_": "runtime.models.mlp.MLP", "input_dim": 8, "hidden_dim": 32,
                  "output_dim": 4},
        "optim": {"_target_": "torch.optim.Adam", "lr": 0.01},
        "layout": {"gpus_per_worker": 0, "backend": "gloo", "numa_affinity": False,
                   "dp_shard": 1},
        "data": {"datasets": [{"name": "features", "_target_": DATASET,
                     "folder": str(folder), "pace_s": pace_s, "kill_at": list(kill_at),
                     "length": 200_000, "dim": 8}],
                 "batch_size": batch, "shuffle": False, "producers": 1, "prefetch_batches": 1,
                 "start_method": "fork"},
        "logging": {"forward_worker_logs": False, "fleet_every_steps": 0},
        "telemetry": {"enabled": False},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    # Every rank a whole replica (DDP); with torchft, every rank of each group.
    raw["layout"].setdefault("dp_replicate", -1)
    return build_config(raw, "test")


def ledger(folder: Path) -> list[dict[str, Any]]:
    """Every committed step of every rank, as the sample ledger holds it."""
    lines = []
    for path in sorted(folder.glob("*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line]
    return lines


def kills(folder: Path) -> list[dict[str, Any]]:
    """The kills PacedFeatures made: when, and which pid."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("kill-*"))]
