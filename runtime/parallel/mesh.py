"""The device mesh a layout asks for: its shape, checked against the world, and the mesh.

Dimensions, outermost first: `dp_replicate` (HSDP's replica groups; fault tolerance's
replica groups), `dp_shard` (FSDP sharding) and `tp` (tensor parallelism, innermost so its
frequent all-reduces stay between neighbouring ranks, as in torchtitan's ParallelDims).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from runtime.errors import ConfigError

DIMS = ("dp_replicate", "dp_shard", "tp")
DP_DIMS = DIMS[:2]


class ParallelSettings(Protocol):
    """What `runtime.parallel` reads of the config's `layout` section (read-only: the
    section is a frozen pydantic model)."""

    @property
    def dp_replicate(self) -> int: ...  # -1: the rest of the world
    @property
    def dp_shard(self) -> int: ...  # -1: the rest of the world
    @property
    def tp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def param_dtype(self) -> str: ...
    @property
    def reduce_dtype(self) -> str: ...
    @property
    def activation_checkpointing(self) -> str: ...  # "none" | "full"
    @property
    def compile(self) -> bool: ...


@dataclass(frozen=True)
class MeshShape:
    """Ranks along each mesh dimension; their product is the world size."""

    dp_replicate: int
    dp_shard: int
    tp: int

    @property
    def world_size(self) -> int:
        return self.dp_replicate * self.dp_shard * self.tp

    @property
    def strategy(self) -> str:
        """The usual name of this combination."""
        data = {(False, False): "", (True, False): "replicated", (False, True): "FSDP",
                (True, True): "HSDP"}[self.dp_replicate > 1, self.dp_shard > 1]
        parts = [data] * bool(data) + ["TP"] * (self.tp > 1)
        return " + ".join(parts) or "one rank"

    def explain(self) -> str:
        """One line for the driver's plan, e.g. "mesh 2 replicate x 2 shard x 1 tensor = 4
        ranks: HSDP"."""
        return (f"mesh {self.dp_replicate} replicate x {self.dp_shard} shard x {self.tp} "
                f"tensor = {self.world_size} ranks: {self.strategy}")


def mesh_shape(settings: ParallelSettings, world_size: int) -> MeshShape:
    """The shape `settings` asks for on `world_size` ranks, or a ConfigError naming the
    layout field and what is allowed."""
    for field in ("cp", "pp"):
        if getattr(settings, field) != 1:
            raise ConfigError(f"layout.{field}", f"{getattr(settings, field)}: not built in "
                              "GKR's driver yet; allowed: 1")
    if settings.tp < 1:
        raise ConfigError("layout.tp", f"{settings.tp}: allowed: >= 1")
    for field in ("dp_replicate", "dp_shard"):
        value = getattr(settings, field)
        if value == 0 or value < -1:
            raise ConfigError(f"layout.{field}", f"{value}: allowed: >= 1, or -1 for the rest "
                              "of the world")
    if settings.dp_replicate == settings.dp_shard == -1:
        raise ConfigError("layout.dp_replicate", "-1, and dp_shard is -1 too: allowed: -1 for "
                          "one of them at most")
    return _fit(settings.dp_replicate, settings.dp_shard, settings.tp, world_size)


def _fit(replicate: int, shard: int, tp: int, world_size: int) -> MeshShape:
    known = abs(replicate * shard) * tp  # the product of the dimensions that are not -1
    if -1 in (replicate, shard):
        rest = "dp_replicate" if replicate == -1 else "dp_shard"
        if world_size % known:
            raise ConfigError(f"layout.{rest}", f"-1 (the rest): the world of {world_size} "
                              f"ranks does not divide by the other dimensions' {known}")
        replicate, shard = (world_size // known, shard) if replicate == -1 else \
            (replicate, world_size // known)
    shape = MeshShape(replicate, shard, tp)
    if shape.world_size != world_size:
        raise ConfigError("layout", f"dp_replicate*dp_shard*tp = {replicate}*{shard}*{tp} = "
                          f"{shape.world_size}, but the world has {world_size} ranks; "
                          "allowed: a product equal to the world size (-1 fits it)")
    return shape


def build_mesh(shape: MeshShape, device_type: str) -> DeviceMesh:
    """The mesh over the default process group, dimensions named as in `DIMS`."""
    sizes = (shape.dp_replicate, shape.dp_shard, shape.tp)
    return init_device_mesh(device_type, sizes, mesh_dim_names=DIMS)
