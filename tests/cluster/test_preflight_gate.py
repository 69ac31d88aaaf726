"""The preflight gate of a RayJob (runtime.preflight.gate): real gloo all-reduces between
"pods" that are processes of this machine (testing/preflight.py), the verdict and its
blame, the policy, and the Ray placement on the local Ray.

Bandwidth thresholds here are far from what loopback gloo gives (a slow pod waits a whole
second before each timed all-reduce; a healthy 0.25 MiB one takes milliseconds), so load
on the machine does not change a verdict."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.errors import ConfigError
from runtime.identity import Env
from runtime.preflight.allreduce import bus_bandwidth, ring_pairs
from runtime.preflight.config import GateConfig, GatePolicy, load_gate
from runtime.preflight.gate import Verdict, judge, next_step, run_gate
from runtime.preflight.result import Finding, PreflightResult, Suspect
from runtime.preflight.tasks import PodOutcome, PodSlot, RankReport
from testing.preflight import FakePod, ProcessPods, RecordingReporter
from testing.ray import ROOT

SLOW = {Env.PREFLIGHT_FAULT: "slow:1"}
FAIL = {Env.PREFLIGHT_FAULT: "fail"}


def config(pods: int, **changes: object) -> GateConfig:
    """A gate over CPU pods with quick checks and a small buffer."""
    values: dict[str, object] = {
        "pods": pods, "checks": {"checks": ["compute", "mounts"], "compute_size": 32},
        "message_mib": 0.25, "iterations": 1, "min_busbw_gbps": 0.002, "timeout_s": 120,
    }
    return GateConfig.model_validate(values | changes)


def slots(count: int) -> list[PodSlot]:
    return [PodSlot(node=f"node-{i}", pod=f"pod-{i}", address="127.0.0.1", key=str(i))
            for i in range(count)]


def outcome(index: int, busbw: float | None = 1.0, pairs: dict[str, float] | None = None,
            error: str | None = None, own: bool = False, local_error: str = "") -> PodOutcome:
    findings = [Finding(check="mounts", severity="error", message=local_error)] \
        if local_error else []
    ranks = None if error else RankReport(exact=True, busbw_gbps=busbw, pairs=pairs or {})
    return PodOutcome(index=index, node=f"node-{index}", pod=f"pod-{index}",
                      local=PreflightResult.of(f"node-{index}", findings, {}), ranks=ranks,
                      error=error, own_fault=own)


def test_bus_bandwidth_is_nccl_tests_busbw() -> None:
    # 1 GB in 1 s over 8 ranks: algbw 1 GB/s, busbw = algbw * 2 * 7 / 8.
    assert bus_bandwidth(10**9, 1.0, 8) == pytest.approx(1.75)
    assert ring_pairs(2) == [] and ring_pairs(3) == [(0, 1), (1, 2), (2, 0)]


def test_the_pod_whose_both_ring_pairs_are_slow_is_blamed() -> None:
    pairs = {"0-1": 0.0005, "1-2": 0.0004, "2-0": 0.5}
    found = judge(config(3), slots(3), [outcome(i, 0.0003, pairs) for i in range(3)])
    assert not found.passed
    assert [s.node for s in found.suspects] == ["node-1"]
    assert "below 0.002" in found.suspects[0].reason and "0.0003" in found.message


def test_a_slow_fabric_everywhere_blames_no_node() -> None:
    pairs = {"0-1": 0.0005, "1-2": 0.0004, "2-0": 0.0005}
    found = judge(config(3), slots(3), [outcome(i, 0.0004, pairs) for i in range(3)])
    assert not found.passed and found.suspects == []
    assert "not attributable to one node" in found.message
    two = judge(config(2), slots(2), [outcome(i, 0.0001) for i in range(2)])
    assert not two.passed and two.suspects == []  # one pair: nobody's in particular


def test_own_faults_and_silence_are_blamed_lost_peers_are_not() -> None:
    found = judge(config(3), slots(3), [
        outcome(0, error="RuntimeError: Connection reset by peer"),
        outcome(1, error="injected", own=True),
        None,
    ])
    assert [(s.node, s.reason) for s in found.suspects] == [
        ("node-1", "all-reduce: injected"), ("node-2", "gave no result in time")]
    alone = judge(config(1), slots(1), [outcome(0, None, local_error="/dev/shm is missing")])
    assert [s.node for s in alone.suspects] == ["node-0"]  # a pod's own check, even alone
    assert judge(config(1), slots(1), [outcome(0, None)]).passed  # one rank: no link to time


def test_the_policy_decides_what_a_failure_leads_to() -> None:
    blamed = Verdict(False, None, [Suspect(node="n", pod="p", reason="r")], "")
    nobody = Verdict(False, None, [], "")
    retry = GatePolicy(on_failure="retry", attempts=2)
    assert next_step(Verdict(True, 1.0, [], ""), 1, retry, True) == "run"
    assert next_step(blamed, 1, retry, True) == "retry"
    assert next_step(blamed, 2, retry, True) == "teardown"  # attempts spent
    assert next_step(blamed, 1, retry, False) == "teardown"  # nobody to replace pods
    assert next_step(nobody, 1, retry, True) == "teardown"  # nothing to replace
    assert next_step(blamed, 1, GatePolicy(attempts=2), True) == "teardown"


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"policy\.on_failure"):
        load_gate('{"pods": 2, "policy": {"on_failure": "sometimes"}}')
    with pytest.raises(ConfigError, match="min_busbw_gbps"):
        load_gate('{"pods": 2, "min_busbw_gbps": -1}')
    with pytest.raises(ConfigError, match="not set"):
        load_gate(None)


def test_the_gate_module_refuses_bad_settings_without_a_traceback() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), Env.PREFLIGHT_GATE: '{"pods": 0}',
           Env.ENTRYPOINT: "true"}
    done = subprocess.run([sys.executable, "-m", "runtime.preflight.gate"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "$GKR_PREFLIGHT_GATE: pods:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_two_pods_pass_the_gloo_all_reduce() -> None:
    reporter = RecordingReporter()
    record = run_gate(config(2, min_busbw_gbps=1e-6), ProcessPods(
        [FakePod("pod-a", "node-a"), FakePod("pod-b", "node-b")]), reporter)
    assert record.passed and record.next == "run", record.message
    assert record.backend == "gloo" and record.busbw_gbps and record.busbw_gbps > 1e-6
    assert reporter.records == [record] and record.suspects == []


@pytest.mark.slow
def test_a_failing_rank_fails_the_gate_and_names_its_node() -> None:
    reporter = RecordingReporter()
    record = run_gate(config(2), ProcessPods(
        [FakePod("pod-a", "node-a"), FakePod("pod-b", "node-b", FAIL)]), reporter)
    assert not record.passed and record.next == "teardown"
    assert [(s.node, s.pod) for s in record.suspects] == [("node-b", "pod-b")]
    assert "injected fault" in record.suspects[0].reason


@pytest.mark.slow
def test_a_slow_pod_among_three_is_singled_out() -> None:
    record = run_gate(config(3), ProcessPods([
        FakePod("pod-a", "node-a"), FakePod("pod-b", "node-b", SLOW),
        FakePod("pod-c", "node-c")]), RecordingReporter())
    assert not record.passed and record.busbw_gbps is not None and record.busbw_gbps < 0.002
    assert [s.node for s in record.suspects] == ["node-b"], record.message


@pytest.mark.slow
def test_retry_replaces_the_blamed_pod_and_runs_again() -> None:
    pods = ProcessPods([FakePod("pod-a", "node-a"), FakePod("pod-b", "node-b", FAIL)])
    reporter = RecordingReporter(pods, {"pod-b": FakePod("pod-b2", "node-c")})
    policy = {"on_failure": "retry", "attempts": 2, "replacement_timeout_s": 60}
    record = run_gate(config(2, policy=policy), pods, reporter)
    assert [(r.attempt, r.passed, r.next) for r in reporter.records] == [
        (1, False, "retry"), (2, True, "run")]
    assert reporter.asked == [["pod-b"]]
    assert pods.ran == [["pod-a", "pod-b"], ["pod-a", "pod-b2"]] and record.passed


@pytest.mark.slow
def test_ray_places_one_agent_per_worker_node(local_ray) -> None:
    """The local Ray is one node with CPUs: one pod, one rank (no link to time)."""
    from runtime.preflight.placement import RayPods  # Ray, for this test only

    pods = RayPods(gpus_per_pod=0)
    try:
        record = run_gate(config(1), pods, RecordingReporter())
    finally:
        pods.close()
    assert record.passed, record.message
    assert record.pods == 1 and record.busbw_gbps is None
