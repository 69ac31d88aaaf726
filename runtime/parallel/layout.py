"""A rank's model laid out as the `layout` section says, on this rank's device.

Pure data parallelism (every rank a whole replica: dp_shard = 1, tp = 1) is DDP, as in
torchtitan, so that its gradient all-reduce can be timed per bucket (runtime.telemetry's
straggler analysis on gloo); anything sharded goes through FSDP2 / TP (`parallelize`).
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
    """`model` moved to `device` and wrapped for the layout's mesh."""
    model = model.to(device)
    world = world_size()
    shape = mesh_shape(settings, world)
    if world == 1 or _replicas_only(shape):
        model = parallelize(model, None, settings)  # checkpointing and compile only
        if world == 1:
            return model
        ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    return parallelize(model, build_mesh(shape, device.type), settings)


def _replicas_only(shape: MeshShape) -> bool:
    return shape.dp_shard == 1 and shape.tp == 1
