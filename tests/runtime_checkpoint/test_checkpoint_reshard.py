"""Resharding on load: a DTensor state saved by 4 gloo ranks is loaded by 2 (real DCP)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer

_FULL = torch.arange(64 * 6, dtype=torch.float32).view(64, 6)


def _state(world: int, source: torch.Tensor, offset: int) -> dict:
    mesh = init_device_mesh("cpu", (world,))
    weight = distribute_tensor(source, mesh, [Shard(0)])
    return {"model": {"weight": weight}, "loader": {"epoch": 2, "offset": offset}}


def _worker(rank: int, world: int, store: str, uri: str, phase: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        ckpt = Checkpointer(CheckpointConfig(uri=uri, interval_steps=5))
        if phase == "save":
            ckpt.maybe_save(5, _state(world, _FULL, 36))
            ckpt.close()
            return
        state = _state(world, torch.zeros_like(_FULL), 0)
        assert ckpt.load(state) == 5
        local = state["model"]["weight"].to_local()
        rows = 64 // world
        assert torch.equal(local, _FULL[rank * rows : (rank + 1) * rows])
        assert state["loader"] == {"epoch": 2, "offset": 36}
    finally:
        dist.destroy_process_group()


def _run(world: int, tmp_path: Path, phase: str) -> None:
    store = tmp_path / f"store-{phase}"
    uri = str(tmp_path / "ckpt")
    tmp.start_processes(
        _worker, args=(world, str(store), uri, phase), nprocs=world, start_method="spawn"
    )


@pytest.mark.slow
def test_four_rank_checkpoint_loads_into_two_ranks(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _run(4, tmp_path, "save")
    meta = (tmp_path / "ckpt" / "step-0000000005" / "COMMITTED").read_text()
    assert '"world_size": 4' in meta
    _run(2, tmp_path, "load")
