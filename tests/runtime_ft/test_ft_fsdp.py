"""FSDP2 inside torchft replica groups (the groups are the replicate dimension): real Ray
Train worker groups, a real Lighthouse, gloo, and a SIGKILL from the data stream.

Each rank records the loss of every batch it trains (RecordedDistillation), so a run of 2
groups x 2 FSDP2 ranks is compared rank by rank with one 4-rank FSDP2 run without torchft:
the same samples (slot `group x 2 + rank` of 4), the same initial weights, and gradients
averaged over the same 4 ranks, in another order (reduce-scatter over 2, then torchft's
all-reduce over the 2 groups, against one reduce-scatter over 4).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.tensor import DTensor

from runtime.errors import ConfigError
from runtime.run.config import TrainConfig, build_config
from runtime.tasks.base import StepLoss, TaskContext
from runtime.tasks.distill import Distillation
from runtime.train.check import check_run
from runtime.train.driver import TrainResult, run_training
from testing.ft import ledger

BATCH, GROUP, STEPS = 4, 2, 12
# Float32 sums of the same 4 gradients in another order differ in the last bits (~1e-7
# relative; measured: at most 2.5e-7 in the loss over 12 steps). 1e-5 is far above that
# rounding and far below what a wrong average does: groups that did not average each other's
# gradients would step apart by Adam's lr (1e-2) per weight from the first step.
RTOL = 1e-5


class RecordedDistillation(Distillation):
    """The distillation toy, appending each rank's loss of every batch to
    `folder/loss-<rank>.jsonl` (rank over every replica group)."""

    def __init__(self, folder: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.folder, self.rank = Path(folder), -1

    def start(self, context: TaskContext) -> None:
        super().start(context)
        self.rank = context.rank

    def loss(self, model: nn.Module, batch: torch.Tensor | dict[str, torch.Tensor]) -> StepLoss:
        weights = _checksum(model)  # before the forward: the rank's own float32 shards
        out = super().loss(model, batch)
        line = {"pid": os.getpid(), "loss": float(out.loss.detach()), "weights": weights}
        with (self.folder / f"loss-{self.rank}.jsonl").open("a") as file:
            file.write(json.dumps(line) + "\n")
        return out


def _checksum(model: nn.Module) -> float:
    with torch.no_grad():
        return sum(float(_local(p).double().sum()) for p in model.parameters())


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _config(folder: Path, *, steps: int = STEPS, pace_s: float = 0.0,
            kill_at: tuple[int, ...] = (), **sections: dict[str, Any]) -> TrainConfig:
    """A small run of the MLP on the paced feature stream (testing.ft)."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    raw: dict[str, dict[str, Any]] = {
        "run": {"name": "ft-fsdp", "steps": steps, "log_every": 1, "local_cpus": 8},
        "task": {"_target_": "tests.runtime_ft.test_ft_fsdp.RecordedDistillation",
                 "folder": str(folder), "input_dim": 8, "output_dim": 4},
        "model": {"_target_": "runtime.models.mlp.MLP", "input_dim": 8, "hidden_dim": 32,
                  "output_dim": 4},
        "optim": {"_target_": "torch.optim.Adam", "lr": 0.01},
        "layout": {"gpus_per_worker": 0, "backend": "gloo", "numa_affinity": False,
                   "max_world_size": 2 * GROUP},
        "data": {"datasets": [{"name": "features", "_target_":
                               "testing.ft.PacedFeatures", "folder": str(data),
                               "pace_s": pace_s, "kill_at": list(kill_at),
                               "length": 200_000, "dim": 8}],
                 "batch_size": BATCH, "shuffle": False, "producers": 1,
                 "prefetch_batches": 1, "start_method": "fork"},
        "logging": {"forward_worker_logs": False, "fleet_every_steps": 0},
        "telemetry": {"enabled": False},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return build_config(raw, "test")


def _groups(**ft: Any) -> dict[str, Any]:
    return {"enabled": True, "replica_groups": 2, "heartbeat_timeout_s": 1.0,
            "watchdog_timeout_s": 3.0, "join_timeout_s": 10.0, "timeout_s": 10.0, **ft}


def _losses(folder: Path, key: str = "loss") -> dict[int, list[float]]:
    """Each rank's losses (or weight checksums: `key`), in order."""
    out = {}
    for path in sorted(folder.glob("loss-*.jsonl")):
        rank = int(path.stem.split("-")[1])
        out[rank] = [json.loads(line)[key] for line in path.read_text().splitlines()]
    return out


def _ledger(folder: Path) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """The committed steps of each (group, rank in the group), from the sample ledger."""
    out: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for entry in ledger(folder):
        out[entry["group"], entry["rank"] - entry["group"] * GROUP].append(entry)
    return out


@pytest.mark.slow
def test_two_fsdp2_groups_train_as_one_four_rank_fsdp2_run(local_ray: None,
                                                           tmp_path: Path) -> None:
    grouped, alone = tmp_path / "groups", tmp_path / "alone"
    # Both groups in every quorum (min 2): each step averages over the same 4 ranks.
    run_training(_config(grouped, fault_tolerance=_groups(min_replica_groups=2)))
    run_training(_config(alone))
    expected, got = _losses(alone), _losses(grouped)
    assert sorted(expected) == sorted(got) == list(range(2 * GROUP))
    for rank in expected:
        assert len(got[rank]) == len(expected[rank]) == STEPS
        assert got[rank] == pytest.approx(expected[rank], rel=RTOL), rank
    assert expected[0][-1] < expected[0][0]  # it learns: the comparison is of something


@pytest.mark.slow
def test_a_killed_bfloat16_fsdp2_group_is_replaced_and_heals_while_the_other_trains_on(
    local_ray: None, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "pace").touch()  # paced until the replacement is seen
    # The rank that reads sample 160 (about step 10 of 4 ranks x 4 samples) dies; its group
    # restarts (max_failures 1) and heals its sharded state from the other group.
    run = _Run(_config(tmp_path, steps=200, pace_s=0.1, kill_at=(160,),
                       run={"max_failures": 1},
                       layout={"param_dtype": "bfloat16", "reduce_dtype": "bfloat16"},
                       fault_tolerance=_groups(min_replica_groups=1)))
    killed = _wait(run, "a kill", lambda: list(tmp_path.glob("data/kill-*")))
    victim = json.loads(killed[0].read_text())["pid"]
    ledger = _ledger(tmp_path / "ledger")
    lost = next(g for (g, _), lines in ledger.items() if any(e["pid"] == victim for e in lines))
    back = _wait(run, "the replacement committing", lambda: [
        e for e in _ledger(tmp_path / "ledger")[lost, 0] if e["pid"] != ledger[lost, 0][0]["pid"]])
    (tmp_path / "data" / "pace").unlink(missing_ok=True)
    run.wait()
    assert run.error is None, run.error
    assert run.result is not None
    ledger = _ledger(tmp_path / "ledger")
    survivor = 1 - lost
    for rank in range(GROUP):  # the other never restarted and committed every step from its
        steps = [e["step"] for e in ledger[survivor, rank]]  # first (a late starter heals)
        assert len({e["pid"] for e in ledger[survivor, rank]}) == 1
        assert steps == list(range(steps[0], 201))
        assert steps[0] < back[0]["step"] - 1
    assert any(f"replica group {lost} healed from a live peer at step {back[0]['step'] - 1}"
               in line for line in run.lines)
    # Healed exactly: at the last step both groups hold the same weights, shard by shard.
    weights = _losses(tmp_path, "weights")
    for rank in range(GROUP):
        assert weights[rank][-1] == weights[GROUP + rank][-1], rank
    losses = list(run.result.losses.values())
    assert sum(losses[-50:]) / 50 < sum(losses[:50]) / 50  # bfloat16 FSDP2 learns


class _Run:
    """A training run on a thread of the test, with its printed lines."""

    def __init__(self, config: TrainConfig) -> None:
        self.lines: list[str] = []
        self.result: TrainResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._train, args=(config,), daemon=True)
        self.thread.start()

    def _train(self, config: TrainConfig) -> None:
        try:
            self.result = run_training(config, echo=self.lines.append)
        except BaseException as error:  # the test asserts on it
            self.error = error

    def wait(self, timeout: float = 300) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the run did not end"


def _wait(run: _Run, what: str, found: Any, timeout: float = 200) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := found():
            return value
        if not run.thread.is_alive():
            pytest.fail(f"the run ended ({run.error!r}) before: {what}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for: {what}")


def test_fsdp2_inside_groups_is_the_group_mesh(tmp_path: Path) -> None:
    config = _config(tmp_path, fault_tolerance=_groups())
    mesh = check_run(config, world_size=4).mesh
    assert mesh is not None
    assert mesh.explain() == "mesh 1 replicate x 2 shard x 1 tensor = 2 ranks: FSDP"


def test_tensor_parallelism_inside_groups_needs_the_models_plan(tmp_path: Path) -> None:
    config = _config(tmp_path, layout={"dp_shard": 1, "tp": 2}, fault_tolerance=_groups())
    with pytest.raises(ConfigError, match=r"layout\.tp.*no tensor-parallel plan"):
        check_run(config, world_size=4)
