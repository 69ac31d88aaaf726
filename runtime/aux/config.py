"""Typed configuration of the auxiliary services (seed §5.2-§5.4)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OnWorkerLoss(StrEnum):
    """What a proxy does with requests that were in flight on a worker that died."""

    RETRY = "retry"
    FAIL = "fail"


class Placement(StrEnum):
    """Ray placement-group strategies for the auxiliary workers' bundles."""

    SPREAD = "SPREAD"
    PACK = "PACK"
    STRICT_SPREAD = "STRICT_SPREAD"
    STRICT_PACK = "STRICT_PACK"


class ServiceConfig(BaseModel):
    """One auxiliary service type: its implementation, resources, sizing and policies."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    impl: str = Field(description="Built-in service name (echo, encoder) or 'module:Class'.")
    options: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments given to the implementation."
    )
    gpus_per_worker: float = Field(0.0, ge=0, description="Whole or fractional GPUs per worker.")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs per worker.")
    ratio: float = Field(8.0, gt=0, description="Training workers served by one worker.")
    min_replicas: int = Field(1, ge=1, description="Fewest workers the plan may give.")
    singleton: bool = Field(False, description="Exactly one worker: cannot be replicated.")
    queue_size: int = Field(
        64, ge=1, description="Bounded queue length per client connection (one per rank)."
    )
    queue_total: int = Field(
        1024, ge=1, description="Requests one worker holds in all connections' queues; past "
        "it, and past a connection's queue_size, a request is answered BUSY.",
    )
    startup_timeout_s: float = Field(120.0, gt=0, description="Time allowed to pass startup.")
    request_timeout_s: float = Field(30.0, gt=0, description="Deadline of one request.")
    retries: int = Field(2, ge=0, description="Client retries after a timeout, loss or busy.")
    on_worker_loss: OnWorkerLoss = Field(
        OnWorkerLoss.RETRY, description="Retry or fail requests in flight on a dead worker."
    )
    max_restarts: int = Field(3, ge=-1, description="Ray restarts of a dead worker (-1: ever).")
    refresh: bool = Field(
        False, description="Training refreshes the workers' weights (runtime.aux.refresh)."
    )

    @model_validator(mode="after")
    def _whole_gpus_above_one(self) -> ServiceConfig:
        gpus = self.gpus_per_worker
        if gpus > 1 and gpus != int(gpus):
            raise ValueError("gpus_per_worker above 1 must be whole (a fraction is <= 1)")
        return self


class AuxConfig(BaseModel):
    """Every auxiliary service of a run and how their workers are placed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    placement: Placement = Field(Placement.SPREAD, description="Placement-group strategy.")
    ipc_dir: str = Field("/tmp", description="Directory of the proxy-to-worker IPC sockets.")
    report_interval_s: float = Field(1.0, gt=0, description="Seconds between metric reports.")
    services: dict[str, ServiceConfig] = Field(
        default_factory=dict, description="Services by name; empty runs training alone."
    )
