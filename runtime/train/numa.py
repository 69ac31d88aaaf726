"""NUMA affinity of training ranks (seed §5.4): each rank runs on the CPUs of its GPU's NUMA node.

The node is the one the GPU's PCI device reports in sysfs (`/sys/bus/pci/devices/<bdf>/
numa_node`, the kernel's ABI in Documentation/ABI/testing/sysfs-bus-pci). The PCI address
comes from NVML when the `pynvml` module (nvidia-ml-py) is installed, which also resolves GPU
UUIDs in CUDA_VISIBLE_DEVICES; without it, from the NVIDIA display controllers in sysfs in
PCI bus order, which is the order of nvidia-smi and NVML and, on a node of identical GPUs,
CUDA's. Ray gives each training worker its GPUs in CUDA_VISIBLE_DEVICES.

Every other case falls back, and says why in the log: CPU ranks (no GPU) take node
`local_rank % nodes`, as before; a GPU whose node is unknown (`numa_node` is -1, the PCI
address cannot be found) or whose node's CPUs are all outside this process's allowed set
leaves the affinity unchanged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SYS = Path("/sys")
NODES = SYS / "devices/system/node"
NVIDIA_VENDOR = "0x10de"
# PCI class codes of a display controller: VGA (0x0300xx) and 3D (0x0302xx), which data-centre
# GPUs report.
GPU_CLASSES = ("0x0300", "0x0302")


@dataclass(frozen=True)
class Affinity:
    """The CPUs a rank should run on (None: leave it as it is), and why."""

    cpus: list[int] | None
    reason: str


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def node_cpus(root: Path = NODES) -> dict[int, list[int]]:
    """CPUs of each NUMA node that has CPUs, by node id; empty where the OS exposes none."""
    if not root.exists():
        return {}
    nodes = {int(p.name[4:]): parse_cpulist((p / "cpulist").read_text())
             for p in root.glob("node[0-9]*")}
    return {node: cpus for node, cpus in sorted(nodes.items()) if cpus}


def numa_nodes(root: Path = NODES) -> list[list[int]]:
    """CPUs of each NUMA node with CPUs, in node order."""
    return list(node_cpus(root).values())


def _visible_gpu(env: Mapping[str, str], local_rank: int) -> str | None:
    """This rank's entry of CUDA_VISIBLE_DEVICES (an index or a UUID); None without GPUs.
    Ray lists either the worker's own GPU or all of the node's, indexed by local rank."""
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible or visible == ["-1"]:
        return None
    return visible[local_rank] if len(visible) > local_rank else visible[0]


def _sysfs_gpus(sys_root: Path) -> list[str]:
    """PCI addresses of the NVIDIA GPUs, in bus order."""
    found = []
    for device in (sys_root / "bus/pci/devices").glob("*"):
        try:
            vendor = (device / "vendor").read_text().strip()
            kind = (device / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and kind.startswith(GPU_CLASSES):
            found.append(device.name)
    return sorted(found)


def _nvml_bus_id(gpu: str) -> str | None:
    """The GPU's PCI address from NVML, as sysfs names it; None when NVML is not there."""
    try:
        import pynvml  # type: ignore[import-not-found]  # optional: nvidia-ml-py
    except ImportError:
        return None
    pynvml.nvmlInit()
    try:
        handle: Any = (pynvml.nvmlDeviceGetHandleByUUID(gpu) if gpu.startswith(("GPU-", "MIG-"))
                       else pynvml.nvmlDeviceGetHandleByIndex(int(gpu)))
        bus_id = pynvml.nvmlDeviceGetPciInfo(handle).busId
    finally:
        pynvml.nvmlShutdown()
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    domain, _, rest = text.lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"  # NVML pads the domain to 8 digits, sysfs to 4


def gpu_bus_id(gpu: str, sys_root: Path = SYS) -> tuple[str | None, str]:
    """The PCI address of CUDA_VISIBLE_DEVICES entry `gpu`, and where it came from."""
    try:
        from_nvml = _nvml_bus_id(gpu)
    except Exception as error:  # NVML present but failing (driver mismatch): try sysfs
        log.warning("NVML could not name GPU %s (%s); trying sysfs", gpu, error)
        from_nvml = None
    if from_nvml is not None:
        return from_nvml, "NVML"
    if not gpu.isdigit():
        return None, f"GPU {gpu} is a UUID and NVML (pynvml) is not installed"
    gpus = _sysfs_gpus(sys_root)
    if int(gpu) >= len(gpus):
        return None, f"GPU {gpu} not among the {len(gpus)} NVIDIA PCI devices in sysfs"
    return gpus[int(gpu)], "sysfs"


def gpu_numa_node(bus_id: str, sys_root: Path = SYS) -> int | None:
    """The NUMA node the kernel reports for a PCI device; None when unknown (-1 or absent)."""
    try:
        node = int((sys_root / "bus/pci/devices" / bus_id / "numa_node").read_text())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def choose_affinity(
    local_rank: int, allowed: set[int], env: Mapping[str, str] = os.environ, sys_root: Path = SYS
) -> Affinity:
    """Where this rank should run: its GPU's NUMA node, or the fallback and its reason."""
    nodes = node_cpus(sys_root / "devices/system/node")
    if len(nodes) < 2:
        return Affinity(None, f"{len(nodes)} NUMA node(s) with CPUs: nothing to choose")
    gpu = _visible_gpu(env, local_rank)
    if gpu is None:
        node = sorted(nodes)[local_rank % len(nodes)]
        return _within(nodes[node], allowed, f"no GPU: node {node} = local rank {local_rank} "
                       f"mod {len(nodes)} nodes")
    bus_id, source = gpu_bus_id(gpu, sys_root)
    if bus_id is None:
        return Affinity(None, f"unchanged: {source}")
    gpu_node = gpu_numa_node(bus_id, sys_root)
    if gpu_node is None or gpu_node not in nodes:
        return Affinity(None, f"unchanged: GPU {gpu} ({bus_id}, from {source}) reports no "
                        "NUMA node with CPUs")
    return _within(nodes[gpu_node], allowed, f"GPU {gpu} at {bus_id} (from {source}) is on "
                   f"NUMA node {gpu_node}")


def _within(cpus: list[int], allowed: set[int], why: str) -> Affinity:
    usable = [cpu for cpu in cpus if cpu in allowed]
    if not usable:
        return Affinity(None, f"unchanged: {why}, but none of its CPUs is allowed here")
    return Affinity(usable, why)


def pin_to_numa_node(local_rank: int, sys_root: Path = SYS) -> Affinity:
    """Pin this process to the CPUs `choose_affinity` picks; logs the choice and its reason
    (a fallback as a warning, as on a GPU node it costs memory bandwidth)."""
    affinity = choose_affinity(local_rank, os.sched_getaffinity(0), os.environ, sys_root)
    if affinity.cpus is not None:
        os.sched_setaffinity(0, affinity.cpus)
    gpu_fallback = affinity.cpus is None and _visible_gpu(os.environ, local_rank) is not None
    (log.warning if gpu_fallback else log.info)(
        "local rank %d NUMA affinity: %s (%s)", local_rank,
        affinity.cpus if affinity.cpus is not None else "unchanged", affinity.reason,
    )
    return affinity
