"""What an auxiliary service implements, the built-in services, and the lookup by name."""

from __future__ import annotations

import importlib
import os
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from runtime.errors import ConfigError

Payload = dict[str, Any]


class AuxService(Protocol):
    """A service hosted by an auxiliary worker."""

    def startup_check(self) -> None:
        """Raise if the service cannot serve (weights missing, device broken)."""

    def handle(self, method: str, payload: Payload) -> Payload:
        """Serve one request."""


@runtime_checkable
class CheckpointableService(Protocol):
    """A service with state of its own; rank 0 has every worker save it with each training
    checkpoint (seed §7.1). Called from the actor's thread while the worker serves."""

    def save_checkpoint(self, uri: str) -> None:
        """Persist the state under `uri` (a local directory or fsspec URL)."""

    def load_checkpoint(self, uri: str) -> None:
        """Restore the state saved under `uri`."""


class EchoService:
    """Returns what it gets; `sleep` and `fail` exercise deadlines and error propagation,
    `where` names the serving process (to check placement and load balancing)."""

    def startup_check(self) -> None:
        """Nothing to load."""

    def handle(self, method: str, payload: Payload) -> Payload:
        """echo: the payload; sleep: wait `seconds`; fail: raise ValueError; where: pid, host."""
        if method == "where":
            return {"pid": os.getpid(), "host": socket.gethostname()}
        if method == "sleep":
            time.sleep(float(payload.get("seconds", 0.0)))
        elif method == "fail":
            raise ValueError(str(payload.get("message", "requested failure")))
        elif method != "echo":
            raise KeyError(f"echo service has no method {method!r}")
        return payload


class EncoderService:
    """A frozen teacher network: `encode` maps inputs `x` to targets `y` for distillation."""

    def __init__(self, input_dim: int, output_dim: int, hidden_dim: int = 64, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.input_dim = input_dim
        self.w1 = torch.randn(input_dim, hidden_dim, generator=generator) / input_dim**0.5
        self.w2 = torch.randn(hidden_dim, output_dim, generator=generator) / hidden_dim**0.5

    def startup_check(self) -> None:
        """A forward pass on zeros must give finite outputs of the right shape."""
        out = self._forward(torch.zeros(1, self.input_dim))
        if out.shape[1] != self.w2.shape[1] or not torch.isfinite(out).all():
            raise RuntimeError("encoder startup check: bad output")

    def handle(self, method: str, payload: Payload) -> Payload:
        """encode: {'x': (batch, input_dim)} -> {'y': (batch, output_dim)}."""
        if method != "encode":
            raise KeyError(f"encoder service has no method {method!r}")
        with torch.no_grad():
            return {"y": self._forward(torch.as_tensor(payload["x"], dtype=torch.float32))}

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w1) @ self.w2

    def load_weights(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        """A weight refresh (runtime.aux.refresh): `w1` and `w2`, or either alone."""
        for name in ("w1", "w2"):
            if name in tensors and tensors[name].shape != getattr(self, name).shape:
                raise ValueError(f"refresh {version}: {name} has shape "
                                 f"{tuple(tensors[name].shape)}, the encoder "
                                 f"{tuple(getattr(self, name).shape)}")
        self.w1, self.w2 = tensors.get("w1", self.w1), tensors.get("w2", self.w2)


BUILT_IN: dict[str, Callable[..., AuxService]] = {
    "echo": EchoService,
    "encoder": EncoderService,
}


def build_service(field: str, impl: str, options: dict[str, Any]) -> AuxService:
    """A built-in service by name, or any class given as 'module:Class'."""
    factory = BUILT_IN.get(impl) or _import(field, impl)
    try:
        return factory(**options)
    except TypeError as error:
        raise ConfigError(f"{field}.options", f"do not fit {impl}: {error}") from error


def _import(field: str, impl: str) -> Callable[..., AuxService]:
    module_name, _, attribute = impl.partition(":")
    if not attribute:
        allowed = ", ".join(sorted(BUILT_IN))
        raise ConfigError(f"{field}.impl", f"{impl!r} is neither built in ({allowed}) "
                          "nor 'module:Class'")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{field}.impl", f"cannot import {impl!r}: {error}") from error
