"""Adapting a training configuration to this machine for `gkr run --local`."""

from __future__ import annotations

import shutil
from typing import Any


def gpus_present() -> bool:
    """Whether this machine has an NVIDIA GPU that a local Ray would offer."""
    import torch

    return shutil.which("nvidia-smi") is not None and torch.cuda.is_available()


# What a local run shows unless the command line says otherwise: the driver's progress lines
# rather than every Ray worker's output (on a cluster the driver log is the job's only log).
LOCAL_DEFAULTS = ("logging.forward_worker_logs=false",)


def local_overrides(raw: dict[str, Any], has_gpu: bool) -> list[str]:
    """Overrides that run a cluster configuration on a local Ray: no remote cluster, and on a
    machine without GPUs, CPU ranks with gloo and CPU-only auxiliary workers."""
    overrides = ["run.ray_address=null"]
    if has_gpu:
        return overrides
    overrides += ["layout.gpus_per_worker=0", "layout.backend=gloo"]
    services = (raw.get("aux") or {}).get("services") or {}
    overrides += [f"aux.services.{name}.gpus_per_worker=0" for name in services]
    return overrides
