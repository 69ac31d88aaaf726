"""Driver and library presence: the NVIDIA driver and libnccl on GPU pods, the plugin paths."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from runtime.preflight.config import PreflightConfig
from runtime.preflight.result import Finding

# The shared objects a GPU pod loads: the CUDA driver API and NCCL (torch's NCCL backend).
GPU_LIBRARIES = ("libcuda.so.1", "libnccl.so.2")


def _loadable(name: str, search: list[str]) -> str | None:
    """Where the library loads from: the given folders first, then the dynamic linker's path."""
    for folder in search:
        candidate = Path(folder) / name
        if candidate.exists():
            return str(candidate)
    try:
        ctypes.CDLL(name)
    except OSError:
        found = ctypes.util.find_library(name.removeprefix("lib").split(".so")[0])
        return found
    return name


def _plugin_path(path: str) -> Finding:
    folder = Path(path)
    if not folder.is_dir():
        return Finding(check="libraries", severity="error",
                       message=f"plugin path {path} is missing (is its volume mounted?)")
    objects = sorted(p.name for p in folder.glob("*.so*"))
    if not objects:
        return Finding(check="libraries", severity="error",
                       message=f"plugin path {path} holds no shared libraries")
    return Finding(check="libraries", severity="ok",
                   message=f"plugin path {path}: {len(objects)} libraries")


def check(config: PreflightConfig) -> list[Finding]:
    findings = [_plugin_path(path) for path in config.plugin_paths]
    if config.gpus == 0:
        findings.append(Finding(check="libraries", severity="ok",
                                message="CPU-only pod: no GPU driver or NCCL needed"))
        return findings
    search = config.plugin_paths + os.environ.get("LD_LIBRARY_PATH", "").split(":")
    for name in GPU_LIBRARIES:
        where = _loadable(name, [s for s in search if s])
        findings.append(Finding(check="libraries", severity="ok" if where else "error",
                                message=f"{name}: {where}" if where else f"{name} not loadable"))
    return findings
