"""A rank's model laid out as the `layout` section says, on this rank's device.

Pure data parallelism in float32 (every rank a whole replica: dp_shard = 1, tp = 1) is DDP,
as in torchtitan, so that its gradient all-reduce can be timed per bucket
(runtime.telemetry's straggler analysis on gloo). Anything else goes through FSDP2 / TP
(`parallelize`); mixed precision comes from FSDP2, so a bfloat16 layout is FSDP2 even where
it shards nothing (one GPU, or pure replication). A model built on the meta device gets its
memory only once laid out, each rank for its own shards (`materialize`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from runtime.parallel.apply import parallelize
from runtime.parallel.mesh import MeshShape, ParallelSettings, build_mesh, mesh_shape


def world_size() -> int:
    """Ranks of the default process group (1 without one)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def lay_out(model: nn.Module, settings: ParallelSettings, device: torch.device) -> nn.Module:
    """`model` on `device`, wrapped for the layout's mesh."""
    if not on_meta(model):
        model = model.to(device)
    world = world_size()
    shape = mesh_shape(settings, world)
    if world == 1 and full_precision(settings):  # checkpointing and compile only
        return materialize(parallelize(model, None, settings), device)
    if whole_replicas(shape, settings):
        model = materialize(parallelize(model, None, settings), device)
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    return materialize(parallelize(model, build_mesh(shape, device.type), settings), device)


def on_meta(model: nn.Module) -> bool:
    """Whether the model was built on the meta device (shapes only, no memory)."""
    return any(tensor.is_meta for tensor in (*model.parameters(), *model.buffers()))


def materialize(model: nn.Module, device: torch.device) -> nn.Module:
    """A model built on the meta device, given memory on `device` once laid out (each rank
    only its shards) and initialised by its own `init_weights`; others as they are."""
    if on_meta(model):
        model.to_empty(device=device)
        with torch.no_grad():
            model.init_weights()  # type: ignore[operator]
    return model


def full_precision(settings: ParallelSettings) -> bool:
    return settings.param_dtype == settings.reduce_dtype == "float32"


def whole_replicas(shape: MeshShape, settings: ParallelSettings) -> bool:
    """Whether every rank holds the whole model in float32: then DDP (torchft's, inside a
    replica group), whose buckets are timed for the straggler analysis; else FSDP2 / TP."""
    return full_precision(settings) and shape.dp_shard == 1 and shape.tp == 1
