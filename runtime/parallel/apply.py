"""Apply a layout to a model, in torchtitan's order: tensor parallelism, activation
checkpointing, torch.compile, then FSDP2 (HSDP over a 2-D data mesh).

Each block of the model's `layers` is one unit of checkpointing, compilation and sharding;
a model without `layers` is one unit as a whole. TP needs the model's own
`apply_tensor_parallel(tp_mesh)`, which knows its layer names.

Forward passes without gradients (evaluation) go through `evaluation(model)`: FSDP2 keeps
the root's parameters gathered after a forward until its backward, and after a no-grad
forward the next training step would otherwise read those stale gathered copies (seen in
torch 2.13: the step after a plain `torch.no_grad()` forward diverged from one process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from runtime.errors import ConfigError
from runtime.parallel.mesh import DP_DIMS, ParallelSettings

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CHECKPOINTING = ("none", "full")


def parallelize(model: nn.Module, mesh: DeviceMesh | None,
                settings: ParallelSettings) -> nn.Module:
    """`model` laid out over `mesh` (from `build_mesh`); None: one process without a
    process group, so no TP or sharding. Returns the model to train (the same object unless
    a model without `layers` is wrapped whole for checkpointing)."""
    policy = mixed_precision(settings)
    if settings.tp > 1:
        _tensor_parallel(model, mesh, settings.tp)
    if settings.activation_checkpointing not in CHECKPOINTING:
        raise ConfigError("layout.activation_checkpointing",
                          f"{settings.activation_checkpointing!r}: allowed: {CHECKPOINTING}")
    if settings.activation_checkpointing == "full":
        model = _each_unit(model, checkpoint_wrapper)
    if settings.compile:
        model = _each_unit(model, _compiled)
    if mesh is None:
        _refuse_unsharded_precision(policy)
        return model
    dp_mesh = mesh[DP_DIMS]
    _each_unit(model, lambda unit: _sharded(unit, dp_mesh, policy), root=False)
    # Logits leave the root in float32, so the loss never runs in bfloat16.
    root_policy = MixedPrecisionPolicy(policy.param_dtype, policy.reduce_dtype, torch.float32)
    return _sharded(model, dp_mesh, root_policy)


def mixed_precision(settings: ParallelSettings) -> MixedPrecisionPolicy:
    """FSDP2's policy: parameters gathered in `param_dtype`, gradients reduced in
    `reduce_dtype`; the sharded master copy stays float32."""
    return MixedPrecisionPolicy(param_dtype=_dtype("layout.param_dtype", settings.param_dtype),
                                reduce_dtype=_dtype("layout.reduce_dtype",
                                                    settings.reduce_dtype))


@contextmanager
def evaluation(model: nn.Module) -> Iterator[None]:
    """No gradients inside; on leaving, a sharded model frees its gathered parameters so the
    next training step gathers the current ones."""
    try:
        with torch.no_grad():
            yield
    finally:
        if isinstance(model, FSDPModule):
            model.reshard()


def flops_per_token(model: nn.Module, seq_len: int) -> float | None:
    """The model's training FLOPs per token (for MFU), or None where it does not say."""
    method = getattr(model, "flops_per_token", None)
    return float(method(seq_len)) if callable(method) else None


def _dtype(field: str, name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ConfigError(field, f"{name!r}: allowed: {', '.join(DTYPES)}")
    return DTYPES[name]


def _tensor_parallel(model: nn.Module, mesh: DeviceMesh | None, tp: int) -> None:
    apply = getattr(model, "apply_tensor_parallel", None)
    if not callable(apply):
        raise ConfigError("layout.tp", f"{tp}: the model {type(model).__name__} has no "
                          "apply_tensor_parallel(tp_mesh) plan; allowed: 1")
    if mesh is None:
        raise ConfigError("layout.tp", f"{tp}: tensor parallelism needs a process group; "
                          "allowed without one: 1")
    try:
        apply(mesh["tp"])
    except ValueError as error:
        raise ConfigError("layout.tp", str(error)) from error


def _each_unit(model: nn.Module, wrap: Callable[[nn.Module], nn.Module],
               root: bool = True) -> nn.Module:
    """Apply `wrap` to each block of `model.layers`, replacing it there; a model without
    `layers` is one unit itself when `root` (returned wrapped), else left alone."""
    layers = getattr(model, "layers", None)
    if not isinstance(layers, nn.Module):
        return wrap(model) if root else model
    for name, block in list(layers.named_children()):
        layers.register_module(name, wrap(block))
    return model


def _compiled(module: nn.Module) -> nn.Module:
    module.compile()  # in place: parameter names (checkpoint keys) stay as they were
    return module


def _sharded(module: nn.Module, dp_mesh: DeviceMesh, policy: MixedPrecisionPolicy) -> nn.Module:
    # 2-D dp_mesh: replicate over its first dimension, shard over its second (HSDP).
    fully_shard(module, mesh=dp_mesh, mp_policy=policy)  # in place: the class becomes FSDP...
    return module


def _refuse_unsharded_precision(policy: MixedPrecisionPolicy) -> None:
    if policy.param_dtype not in (None, torch.float32):
        raise ConfigError("layout.param_dtype", f"{policy.param_dtype}: mixed precision is "
                          "FSDP2's; without a process group allowed: float32")
