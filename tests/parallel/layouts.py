"""What the multi-rank tests share: a layout, the tiny model, its data and a short training.

`train` runs in the test process (the unsharded reference) and in each spawned gloo rank
(`run_ranks`), so both sides train the same model on the same global batches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh

from runtime.errors import ConfigError
from runtime.models import Transformer
from runtime.parallel import build_mesh, evaluation, mesh_shape, parallelize

TINY = {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
        "max_seq_len": 256}
STEPS, BATCH, SEQ = 3, 4, 32


@dataclass(frozen=True)
class Layout:
    """A `runtime.parallel.ParallelSettings` (the config's layout section, as a test
    writes it)."""

    dp_replicate: int = 1
    dp_shard: int = -1
    tp: int = 1
    cp: int = 1
    pp: int = 1
    param_dtype: str = "float32"
    reduce_dtype: str = "float32"
    activation_checkpointing: str = "none"
    compile: bool = False


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(**TINY)  # type: ignore[arg-type]


def batches() -> list[Tensor]:
    """One global batch again and again: its loss must fall, so a broken update shows."""
    batch = torch.randint(0, 256, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(1))
    return [batch] * STEPS


def probe() -> Tensor:
    return torch.randint(0, 256, (2, SEQ), generator=torch.Generator().manual_seed(2))


def train(model: nn.Module, mesh: DeviceMesh | None) -> list[float]:
    """STEPS SGD steps; each data-parallel rank takes its rows of the global batch, and
    the loss returned is the global batch's mean."""
    # SGD, not Adam: its first steps move by lr * sign(grad), which blows rounding-level
    # gradient differences between layouts up to whole steps.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    index, size = _dp_coordinate(mesh)
    losses = []
    for batch in batches():
        rows = batch.chunk(size)[index]
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), rows[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(_global_mean(loss.detach(), mesh))
    return losses


def _dp_coordinate(mesh: DeviceMesh | None) -> tuple[int, int]:
    if mesh is None:
        return 0, 1
    replicate, shard = mesh["dp_replicate"], mesh["dp_shard"]
    return (replicate.get_local_rank() * shard.size() + shard.get_local_rank(),
            replicate.size() * shard.size())


def _global_mean(loss: Tensor, mesh: DeviceMesh | None) -> float:
    if mesh is not None:  # tensor-parallel ranks hold equal losses: the mean over all is right
        dist.all_reduce(loss)
        loss /= dist.get_world_size()
    return float(loss)


def _rank(rank: int, world: int, store: str, out: str, layouts: dict[str, Layout]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank,
                            world_size=world)
    try:
        results: dict[str, object] = {name: _scenario(layout, world)
                                      for name, layout in layouts.items()}
        results["refused"] = _refusal(world)
        if rank == 0:
            torch.save(results, Path(out) / "results.pt")
    finally:
        dist.destroy_process_group()


def _scenario(layout: Layout, world: int) -> dict[str, object]:
    mesh = build_mesh(mesh_shape(layout, world), "cpu")
    model = parallelize(tiny(), mesh, layout)
    with evaluation(model):
        logits = model(probe())
    if isinstance(logits, torch.distributed.tensor.DTensor):
        logits = logits.full_tensor()
    return {"logits": logits.detach().float(), "losses": train(model, mesh)}


def _refusal(world: int) -> tuple[str, str]:
    """The error of a TP layout that does not divide the model's key/value heads."""
    layout = Layout(dp_shard=world // 2, tp=2)
    model = Transformer(**{**TINY, "n_kv_heads": 1})  # type: ignore[arg-type]
    try:
        parallelize(model, build_mesh(mesh_shape(layout, world), "cpu"), layout)
    except ConfigError as error:
        return error.field, error.message
    raise AssertionError("a TP size that does not divide n_kv_heads was accepted")


def run_ranks(world: int, layouts: dict[str, Layout], folder: Path) -> dict[str, Any]:
    """Each layout's probe logits and losses, trained on `world` spawned gloo ranks, and
    under "refused" the (field, message) of a layout the model cannot take."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    tmp.start_processes(_rank, args=(world, str(folder / "store"), str(folder), layouts),
                        nprocs=world, start_method="spawn")
    results: dict[str, Any] = torch.load(folder / "results.pt")
    return results
