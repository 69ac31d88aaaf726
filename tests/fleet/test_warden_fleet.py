"""Warden on a reduced simulated fleet (benchmarks/fleet/warden.py; the full sizes are the
benchmark's): real Warden processes on a real Temporal dev server, the clusters' Kubernetes
API, Prometheus and Compute Engine as test doubles, GPU faults injected while it runs."""

from __future__ import annotations

import pytest

from benchmarks.fleet import Fleet
from benchmarks.fleet.warden import FAULTS, HELD_SWEEPS, measure

pytestmark = pytest.mark.slow

SWEEP_ITERATIONS = 3  # sweeps continue as new after three, so the run crosses a few


def test_every_fault_is_cordoned_and_nothing_else():
    figures = {f.name: f.value for f in measure(
        Fleet(36), interval_s=1.0, window_s=6.0, faults_per_hour_per_1000_gpus=300,
        false_alarm_fraction=0.05, sweep_iterations=SWEEP_ITERATIONS)}

    assert figures["burst size"] == 2
    # Steady faults take the kinds in turn: each kind (Xids, DCGM counters, conditions, an
    # event; definite and suspect) was injected at least once.
    assert figures["faults injected"] - figures["burst size"] >= len(FAULTS)
    assert figures["faults missed"] == 0  # definite ones at once, suspects after their check
    assert figures["false cordons"] == 0  # noise below the thresholds and application Xids
    # A false alarm's gauge stays at 74 after its check passed: one check, then held off.
    assert figures["false alarms"] == 2
    assert figures["checks per false alarm max"] == 1
    assert figures["sweeps after clearing min"] >= HELD_SWEEPS
    # One workflow run per incident: its history is one incident's, whatever the run length.
    # Only the sweep in flight while a check cleared a node can start a run for it that finds
    # the hold-off and ends; the sweeps after it start none.
    assert figures["node workflows held off"] <= figures["false alarms"]
    acting = figures["node workflows"] - figures["node workflows held off"]
    assert acting == figures["faults injected"] + figures["false alarms"]
    assert figures["node history max"] <= 150
    # A sweep iteration is 11 events (activity, timer, workflow tasks); then continue as new.
    assert figures["sweep history max"] <= 11 * SWEEP_ITERATIONS + 5
