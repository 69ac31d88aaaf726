"""Warden: GPU fleet health manager on Temporal workflows (paper §7.3).

One workflow per node triages, cordons (with memory in annotations), drains, reboots or
escalates to a cloud repair, stress-tests and uncordons; periodic sweeps feed it. Another
sweep keeps relaunch reservations: a finished RayJob's former nodes stay its namespace's a while.
A RayCluster's worker replicas change through one path (`scale_raycluster` for a person,
Warden's shrink for live fault tolerance): the same patch, guard and request-id memory.
"""

from __future__ import annotations

from runtime.warden.cluster import KubeCluster
from runtime.warden.config import WardenConfig, load_config, parse_config
from runtime.warden.model import (
    Incident,
    ScaleRequest,
    ShrinkOutcome,
    ShrinkRequest,
    Trigger,
    node_workflow_id,
)
from runtime.warden.shrink import group_of
from runtime.warden.shrink import scale as scale_raycluster

__all__ = [
    "Incident",
    "KubeCluster",
    "ScaleRequest",
    "ShrinkOutcome",
    "ShrinkRequest",
    "Trigger",
    "WardenConfig",
    "group_of",
    "load_config",
    "node_workflow_id",
    "parse_config",
    "scale_raycluster",
]
