"""Pure parts of Warden: config validation, detection thresholds, cordon memory, shrink."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.errors import ConfigError
from runtime.pods import GpuHost, check_job, check_job_name
from runtime.warden import memory
from runtime.warden.config import DetectionConfig, MetricRule, parse_config
from runtime.warden.detect import (
    condition_signals,
    event_signals,
    held_off,
    metric_signal,
    verdict,
    xid_signal,
)
from runtime.warden.gce import instance_path
from runtime.warden.jobcheck import findings
from runtime.warden.model import ShrinkRequest, Suspicion, Trigger
from runtime.warden.shrink import shrink_patch
from testing.warden import without_host_engine

DETECTION = DetectionConfig()


def test_unknown_key_is_refused_with_its_path():
    allowed = r"warden.yaml: detection.intervall_s: unknown field; allowed: .*\binterval_s\b"
    with pytest.raises(ConfigError, match=allowed):
        parse_config({"detection": {"intervall_s": 3}}, "warden.yaml")


def test_every_error_is_reported_not_only_the_first():
    with pytest.raises(ConfigError) as raised:
        parse_config({"memory": {"escalate_after": 0}, "checks": {"stress": {"level": 9}}})
    assert [p.field for p in raised.value.problems] == ["memory.escalate_after",
                                                        "checks.stress.level"]
    assert str(raised.value).count("\n") == 1  # one line per error


def test_thresholds_must_be_ordered():
    rule = {"metric": "DCGM_FI_DEV_GPU_TEMP", "ambiguous_at": 95, "definite_at": 90}
    with pytest.raises(ConfigError, match=r"detection.metrics.0: .*below definite_at"):
        parse_config({"detection": {"metrics": [rule]}})


def test_stress_level_is_limited_to_dcgm_levels():
    with pytest.raises(ConfigError, match=r"checks.stress.level"):
        parse_config({"checks": {"stress": {"level": 5}}})
    command = parse_config({"checks": {"stress": {"level": 2}}}).checks.stress.as_suite().command
    assert command[:2] == ["/bin/sh", "-c"] and "dcgmi diag -r 2" in command[2]


def test_the_stress_test_starts_a_host_engine_and_exits_with_the_diagnostics_status(
        tmp_path: Path) -> None:
    """The stress Job's shell script run by a real shell, with `nv-hostengine` and `dcgmi`
    as stand-ins on PATH that log their argv: the engine starts before the diagnostic and
    is stopped after it, and the Job's exit status is the diagnostic's."""
    for name, body in (("nv-hostengine", 'echo "engine $*" >> "$LOG"'),
                       ("dcgmi", 'echo "dcgmi $*" >> "$LOG"; exit "$DIAG_STATUS"')):
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    command = parse_config({}).checks.stress.as_suite().command
    for status in (0, 226):
        log = tmp_path / f"log-{status}"
        env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LOG": str(log),
               "DIAG_STATUS": str(status)}
        assert subprocess.run(command, env=env, check=False).returncode == status
        assert log.read_text().splitlines() == ["engine ", "dcgmi diag -r 3", "engine --term"]


def test_the_job_double_fails_dcgmi_without_a_host_engine_as_the_container_would() -> None:
    assert without_host_engine(["dcgmi", "diag", "-r", "3"])
    assert without_host_engine(["/bin/sh", "-c", "dcgmi diag -r 3 && nv-hostengine"])
    assert not without_host_engine(parse_config({}).checks.stress.as_suite().command)
    assert not without_host_engine(["python", "-m", "runtime.preflight"])


def _below(rule) -> st.SearchStrategy[float]:
    limit = rule.ambiguous_at if rule.ambiguous_at is not None else rule.definite_at
    return st.floats(min_value=0, max_value=limit, exclude_max=True, allow_nan=False)


@given(st.data())
def test_noise_below_every_threshold_never_raises_a_suspicion(data):
    signals = [metric_signal(rule, data.draw(_below(rule))) for rule in DETECTION.metrics]
    hardware = set(DETECTION.xid.definite) | set(DETECTION.xid.ambiguous)
    xid = data.draw(st.integers(0, 200).filter(lambda code: code not in hardware))
    signals.append(xid_signal(DETECTION, xid))
    assert verdict("n", [s for s in signals if s is not None]) is None


@given(st.sampled_from(DETECTION.xid.definite), st.sampled_from(DETECTION.xid.ambiguous))
def test_definite_beats_ambiguous(definite, ambiguous):
    signals = [xid_signal(DETECTION, ambiguous), xid_signal(DETECTION, definite)]
    suspicion = verdict("n", [s for s in signals if s is not None])
    assert suspicion is not None and suspicion.trigger.kind == "fault"
    only = verdict("n", [s for s in [xid_signal(DETECTION, ambiguous)] if s])
    assert only is not None and only.trigger.kind == "suspect"


def test_conditions_and_events_count_only_at_their_thresholds():
    node = {"status": {"conditions": [{"type": "Ready", "status": "True"},
                                      {"type": "KernelDeadlock", "status": "True"}]}}
    assert [s.severity for s in condition_signals(DETECTION, node)] == ["definite"]
    config = parse_config({"detection": {"events": [
        {"reason": "TaskHung", "severity": "ambiguous", "min_count": 3}]}}).detection
    assert event_signals(config, [{"reason": "TaskHung", "count": 2}]) == []
    assert len(event_signals(config, [{"reason": "TaskHung", "count": 2},
                                      {"reason": "TaskHung"}])) == 1


def test_cordon_memory_counts_only_the_window():
    day = 86400.0
    notes = {memory.CORDONS: f"{100 * day:.0f},{109 * day:.0f},junk"}
    patch, count = memory.cordon_patch(notes, 110 * day, 7 * day, "Xid 79", "run/1")
    written = patch["metadata"]["annotations"]
    assert count == 2 and written[memory.RECENT] == "2"
    assert written[memory.CORDONS] == f"{109 * day:.0f},{110 * day:.0f}"
    assert patch["spec"] == {"unschedulable": True}
    assert memory.uncordon_patch()["metadata"]["annotations"][memory.OWNED] is None


def test_a_signal_keeps_its_key_whatever_its_value():
    rule = MetricRule(metric="DCGM_FI_DEV_GPU_TEMP", ambiguous_at=90, definite_at=100)
    warm, hot, failing = (metric_signal(rule, value) for value in (91, 97, 100))
    assert warm is not None and hot is not None and failing is not None
    assert warm.key == hot.key == "DCGM_FI_DEV_GPU_TEMP >= 90" and warm.reason != hot.reason
    assert failing.severity == "definite" and failing.key == "DCGM_FI_DEV_GPU_TEMP >= 100"
    oops = event_signals(DETECTION, [{"reason": "KernelOops", "count": 4}])
    suspicion = verdict("n", [hot, *oops])
    assert suspicion is not None
    assert suspicion.trigger.signals == ("DCGM_FI_DEV_GPU_TEMP >= 90", "event KernelOops")


def test_a_cleared_suspect_is_held_off_until_the_end_or_a_new_signal():
    now = 1_000_000.0
    patch, until = memory.clear_patch(["Xid 74", "event KernelOops"], now, 3600)
    node = {"metadata": patch["metadata"]}

    def suspect(*signals: str) -> Suspicion:
        return Suspicion("n", Trigger("suspect", "; ".join(signals), signals=signals))

    assert until == "1970-01-12T14:46:40Z"  # now + 3600 s
    assert held_off(node, suspect("Xid 74"), now + 60, 3600)
    assert held_off(node, suspect("Xid 74", "event KernelOops"), now + 3599, 3600)
    assert not held_off(node, suspect("Xid 74"), now + 3600, 3600)  # the hold-off is over
    assert not held_off(node, suspect("Xid 74", "Xid 94"), now, 3600)  # a signal it missed
    assert not held_off(node, Suspicion("n", Trigger("fault", "Xid 74", signals=("Xid 74",))),
                        now, 3600)  # a definite fault acts at once
    assert not held_off(node, suspect(), now, 3600)  # a person's trigger names no signal
    unreadable = {memory.CLEARED: "Xid 74", memory.CLEARED_UNTIL: "tomorrow"}
    assert not held_off({"metadata": {"annotations": unreadable}}, suspect("Xid 74"), now, 3600)
    cordon, _ = memory.cordon_patch(memory.notes(node), now, 86400, "Xid 79", "run/1")
    assert cordon["metadata"]["annotations"][memory.CLEARED] is None  # a cordon forgets it


def _raycluster(replicas: int, applied: str = "") -> dict:
    return {"metadata": {"resourceVersion": "3", "annotations": {
        "warden.gkr.dev/shrink-requests": applied}},
        "spec": {"workerGroupSpecs": [{"groupName": "head-ish", "replicas": 1},
                                      {"groupName": "gpu", "replicas": replicas,
                                       "minReplicas": 2}]}}


def test_shrink_patch_applies_once_and_never_goes_negative():
    request = ShrinkRequest("r1", "ns", "c", "gpu", 5)
    patch, outcome = shrink_patch(_raycluster(4), request)
    assert outcome.replicas == 0 and outcome.applied
    groups = patch["spec"]["workerGroupSpecs"]
    assert groups[1]["replicas"] == 0 and groups[1]["minReplicas"] == 0
    assert groups[0] == {"groupName": "head-ish", "replicas": 1}
    assert patch["metadata"]["resourceVersion"] == "3"
    again, outcome = shrink_patch(_raycluster(4, "r0,r1"), request)
    assert again == {} and not outcome.applied
    with pytest.raises(ConfigError, match="no worker group 'cpu'"):
        shrink_patch(_raycluster(4), ShrinkRequest("r2", "ns", "c", "cpu", 1))


def test_check_job_is_pinned_tolerates_the_cordon_and_takes_all_gpus():
    host = GpuHost(gpus=8, shm_size="64Gi", volume_mounts=[{"name": "lib", "mountPath": "/l"}],
                   volumes=[{"name": "lib", "hostPath": {"path": "/l"}}])
    config = parse_config({"checks": {"accelerators": {"nvidia-h100-80gb": host.model_dump()}}})
    node = {"metadata": {"name": "gke-a3-node-1",
                         "labels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}}
    job = check_job(config.checks.node_check(node, config.checks.preflight, "run/preflight/0"))
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gke-a3-node-1"}
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
            "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert {"name": "lib", "mountPath": "/l"} in pod["containers"][0]["volumeMounts"]
    assert pod["containers"][0]["command"] == ["python", "-m", "runtime.preflight"]
    assert len(check_job_name("x" * 300)) <= 63


def test_findings_come_from_the_termination_message():
    def pod(message: str) -> dict:
        return {"status": {"containerStatuses": [{"state": {"terminated": {"message": message}}}]}}
    assert findings([pod('log line\n{"findings": ["gpu 3: HBM errors"]}')]) == ["gpu 3: HBM errors"]
    assert findings([pod("Error: dcgmi diag failed\nExit 226")]) == [
        "Error: dcgmi diag failed", "Exit 226"]


def test_instance_path_needs_a_gce_provider_id():
    assert instance_path("gce://p/z/i") == "projects/p/zones/z/instances/i"
    with pytest.raises(ConfigError, match=r"spec\.providerID"):
        instance_path("aws:///us-east-1a/i-0")
