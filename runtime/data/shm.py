"""Fixed shared-memory slots that carry samples and batches between pipeline processes.

A payload's tensors are copied once into a slot; only a small description (dtypes,
shapes, offsets and the non-tensor leaves) travels through the bounded queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import torch

from runtime.errors import RuntimeFailure

_ALIGN = 64


class SlotOverflow(RuntimeFailure):
    """A payload does not fit into one shared-memory slot."""


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor of a payload lies inside its slot."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    numpy: bool


class SlotRing:
    """`slots` equal slots in one shared-memory segment; created by the owner, attached by name."""

    def __init__(self, slots: int, slot_bytes: int, name: str | None = None) -> None:
        self.slots, self.slot_bytes = slots, slot_bytes
        create = name is None
        self._shm = shared_memory.SharedMemory(name=name, create=create, size=slots * slot_bytes)
        self.owner = create

    @property
    def name(self) -> str:
        return self._shm.name

    def attach_args(self) -> tuple[int, int, str]:
        return (self.slots, self.slot_bytes, self.name)

    def view(self, slot: int) -> memoryview:
        start = slot * self.slot_bytes
        buf = self._shm.buf
        assert buf is not None, "slot ring used after close()"
        return buf[start : start + self.slot_bytes]

    def close(self) -> None:
        self._shm.close()
        if self.owner:
            self._shm.unlink()


class _Packer:
    """Walks a payload, copying each tensor into the next aligned place of a slot."""

    def __init__(self, buf: memoryview, what: str) -> None:
        self.buf, self.what, self.offset = buf, what, 0

    def walk(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor | np.ndarray):
            return self.leaf(obj)
        if isinstance(obj, dict):
            return {k: self.walk(v) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return type(obj)(self.walk(v) for v in obj)
        return obj

    def leaf(self, leaf: torch.Tensor | np.ndarray) -> TensorRef:
        if isinstance(leaf, np.ndarray):
            t, is_np = torch.from_numpy(np.ascontiguousarray(leaf)), True
        else:
            t, is_np = leaf, False
        nbytes = t.numel() * t.element_size()
        if self.offset + nbytes > len(self.buf):
            raise _overflow(self.what, len(self.buf))
        if nbytes:
            dst = torch.frombuffer(self.buf, dtype=t.dtype, count=t.numel(), offset=self.offset)
            dst.view(t.shape).copy_(t)
        ref = TensorRef(t.dtype, tuple(t.shape), self.offset, is_np)
        self.offset += -(-nbytes // _ALIGN) * _ALIGN
        return ref


def _overflow(what: str, slot_bytes: int) -> SlotOverflow:
    return SlotOverflow(f"{what} needs more than one slot of {slot_bytes} bytes: raise slot_mb")


def packed_size(obj: Any) -> int:
    """Bytes `pack` needs for `obj`: each tensor rounded up to the slot alignment."""
    if isinstance(obj, torch.Tensor | np.ndarray):
        nbytes = obj.nbytes if isinstance(obj, np.ndarray) else obj.numel() * obj.element_size()
        return -(-nbytes // _ALIGN) * _ALIGN
    if isinstance(obj, dict):
        return sum(packed_size(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(packed_size(v) for v in obj)
    return 0


def check_fits(obj: Any, slot_bytes: int, *, what: str) -> None:
    """Raise what `pack` would raise if `obj` does not fit into one slot."""
    if packed_size(obj) > slot_bytes:
        raise _overflow(what, slot_bytes)


def pack(obj: Any, buf: memoryview, *, what: str) -> Any:
    """Copy every tensor of `obj` into `buf`; return the picklable description of `obj`."""
    return _Packer(buf, what).walk(obj)


def unpack(spec: Any, buf: memoryview, *, copy: bool) -> Any:
    """Rebuild a payload from its description; `copy=False` returns views into the slot."""
    if isinstance(spec, TensorRef):
        numel = int(np.prod(spec.shape)) if spec.shape else 1
        if numel == 0:
            t = torch.empty(spec.shape, dtype=spec.dtype)
        else:
            t = torch.frombuffer(buf, dtype=spec.dtype, count=numel, offset=spec.offset)
            t = t.view(spec.shape).clone() if copy else t.view(spec.shape)
        return t.numpy() if spec.numpy else t
    if isinstance(spec, dict):
        return {k: unpack(v, buf, copy=copy) for k, v in spec.items()}
    if isinstance(spec, list | tuple):
        return type(spec)(unpack(v, buf, copy=copy) for v in spec)
    return spec
