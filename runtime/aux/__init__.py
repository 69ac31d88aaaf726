"""Auxiliary services (seed §5.2-§5.4): persistent Ray actors behind per-node proxies,
reached from training ranks over ZeroMQ.

Import the Ray-facing parts (`runtime.aux.coordinator`) only where Ray runs; the client,
wire format and queues import without it.
"""

from runtime.aux.client import AuxClient, Endpoint, ServiceHandle
from runtime.aux.config import AuxConfig, OnWorkerLoss, Placement, ServiceConfig
from runtime.aux.errors import (
    AuxBusy,
    AuxError,
    AuxStartupError,
    AuxTimeout,
    RemoteError,
    WorkerLost,
)

__all__ = [
    "AuxBusy",
    "AuxClient",
    "AuxConfig",
    "AuxError",
    "AuxStartupError",
    "AuxTimeout",
    "Endpoint",
    "OnWorkerLoss",
    "Placement",
    "RemoteError",
    "ServiceConfig",
    "ServiceHandle",
    "WorkerLost",
]
