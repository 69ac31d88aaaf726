"""Warden: GPU fleet health manager on Temporal workflows (paper §7.3).

One workflow per node triages, cordons (with memory in annotations), drains, reboots or
escalates to a cloud repair, stress-tests and uncordons; periodic sweeps feed it. Another
sweep keeps relaunch reservations: a finished RayJob's former nodes stay its namespace's a while.
"""

from __future__ import annotations

from runtime.warden.config import WardenConfig, load_config, parse_config
from runtime.warden.model import Incident, ShrinkOutcome, ShrinkRequest, Trigger, node_workflow_id

__all__ = [
    "Incident",
    "ShrinkOutcome",
    "ShrinkRequest",
    "Trigger",
    "WardenConfig",
    "load_config",
    "node_workflow_id",
    "parse_config",
]
