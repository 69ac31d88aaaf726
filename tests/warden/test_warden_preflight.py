"""A job's preflight gate reports to Warden through its public API (runtime.warden.view, as
runtime.preflight.report calls it): against a real Temporal dev server, an in-process Warden
worker and the Kubernetes API test double, Warden records the result on the RayJob, checks
each blamed node as a suspect, and replaces the blamed pods for a retry."""

from __future__ import annotations

import pytest

from runtime.identity import Annotation, Identity
from runtime.preflight.report import WardenReporter
from runtime.preflight.result import GateRecord, Suspect
from runtime.warden.model import PREFLIGHT_SIGNAL
from testing.warden import gpu_node, raycluster, rayjob
from tests.warden.conftest import RunningWorker, fast_config
from tests.warden.test_warden_flow import result, wait_for

pytestmark = pytest.mark.slow
NS, JOB, RAYCLUSTER = "team-llm", "train-a", "train-a-raycluster-k2x9p"


def failed_record() -> GateRecord:
    suspect = Suspect(node="gpu-b", pod="train-a-workers-b", reason="all-reduce: no GPU 3")
    return GateRecord(passed=False, attempt=1, attempts=2, at="2026-01-01T00:00:00Z", pods=2,
                      backend="nccl", min_busbw_gbps=160.0, suspects=[suspect], next="retry",
                      message="all-reduce over 2 pods (16 ranks, nccl): no bandwidth")


@pytest.fixture
def warden(loop, temporal, doubles, check_jobs, tmp_path):
    config = fast_config(temporal, doubles, tmp_path)
    worker = RunningWorker(loop, temporal, config, sweeps=False)
    yield config
    worker.stop()


def test_warden_records_the_result_checks_the_suspect_and_replaces_its_pod(
        loop, temporal, doubles, warden):
    kube, _, _ = doubles
    for node in ("gpu-a", "gpu-b"):
        kube.put(gpu_node(node))
    kube.put(rayjob(NS, JOB, owner="alice@reve.ai"))
    kube.put(raycluster(NS, RAYCLUSTER, workers=2, rayjob=JOB))
    address = temporal.client.service_client.config.target_host
    identity = Identity(namespace=NS, job=JOB, kind="rayjob")
    reporter = WardenReporter(address, temporal.client.namespace, warden.temporal.task_queue,
                              identity, run_id="gate-1", raycluster=RAYCLUSTER)
    record = failed_record()

    reporter.record(record)
    noted = wait_for("the preflight annotation on the RayJob", lambda: (
        kube.get("ray.io", "rayjobs", NS, JOB)["metadata"].get("annotations") or {}
    ).get(Annotation.PREFLIGHT))
    assert GateRecord.model_validate_json(noted) == record
    incident = result(loop, temporal, "gpu-b")  # the suspect's node check (passing here)
    assert incident.trigger == "suspect" and f"preflight of {NS}/{JOB}" in incident.reason
    assert incident.phase == "cleared"
    cleared = kube.get("", "nodes", "", "gpu-b")["metadata"]["annotations"]
    assert PREFLIGHT_SIGNAL in str(cleared)  # a repeat report is held off a while
    assert kube.get("", "nodes", "", "gpu-a")["spec"].get("unschedulable") is None

    assert reporter.replace("workers", ["train-a-workers-b"], 1)
    group = kube.get("ray.io", "rayclusters", NS, RAYCLUSTER)["spec"]["workerGroupSpecs"][0]
    assert group["replicas"] == 2  # KubeRay deletes the named pod and makes a new one
    assert group["scaleStrategy"] == {"workersToDelete": ["train-a-workers-b"]}


def test_without_warden_nothing_can_replace_a_pod(monkeypatch) -> None:
    from runtime.identity import Env
    from runtime.preflight.report import LogReporter, reporter_from_env

    monkeypatch.delenv(Env.TEMPORAL_ADDRESS, raising=False)
    reporter = reporter_from_env("warden", "gate-2")
    assert isinstance(reporter, LogReporter) and not reporter.can_replace
    assert not reporter.replace("workers", ["p"], 1)
