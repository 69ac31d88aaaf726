"""NUMA affinity of training ranks (seed §5.4): each rank runs on its NUMA node's CPUs."""

from __future__ import annotations

import os
from pathlib import Path

NODES = Path("/sys/devices/system/node")


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def numa_nodes(root: Path = NODES) -> list[list[int]]:
    """CPUs of each NUMA node with CPUs, in node order; empty where the OS exposes none."""
    nodes = sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    cpus = [parse_cpulist((node / "cpulist").read_text()) for node in nodes]
    return [c for c in cpus if c]


def pin_to_numa_node(local_rank: int, root: Path = NODES) -> list[int] | None:
    """Pin this process to node `local_rank % nodes`; None when there is one node or none."""
    nodes = numa_nodes(root) if root.exists() else []
    if len(nodes) < 2:
        return None
    allowed = os.sched_getaffinity(0)
    cpus = [c for c in nodes[local_rank % len(nodes)] if c in allowed]
    if not cpus:
        return None
    os.sched_setaffinity(0, cpus)
    return cpus
