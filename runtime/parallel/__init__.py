"""Parallelism from the layout: the mesh (`mesh_shape`, `build_mesh`) and `parallelize`
(TP, activation checkpointing, compile, FSDP2/HSDP with mixed precision), and
`evaluation(model)` around forward passes without gradients."""

from runtime.parallel.apply import evaluation, flops_per_token, mixed_precision, parallelize
from runtime.parallel.mesh import MeshShape, ParallelSettings, build_mesh, mesh_shape

__all__ = ["MeshShape", "ParallelSettings", "build_mesh", "evaluation", "flops_per_token",
           "mesh_shape", "mixed_precision", "parallelize"]
