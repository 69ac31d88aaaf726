"""Every cluster command of `gkr` through the real `kubernetes` client against the Kubernetes
API test double (testing/doubles/kube_apiserver.py; no API server can run on these machines)."""

from __future__ import annotations

import json
import threading
import zipfile
from pathlib import Path

import git
import pytest
from typer.testing import CliRunner

from generator.catalog import Catalog
from generator.cli import app
from generator.cluster.kubectl import Kubectl, select_pod
from generator.errors import GkrError
from runtime.errors import RuntimeFailure
from runtime.identity import Annotation
from runtime.kube import RAYJOB, Conflict, Kube
from runtime.preflight.result import GateRecord, Next, Suspect
from testing.wait import wait_until
from tests.cluster.conftest import CONTEXT

runner = CliRunner()
NS = "team-llm"
SUBMIT = ["submit", "train-a", "rayjob", "--cluster", "usc1-prod", "--namespace", NS,
          "--pods", "2", "--gpus", "8", "--cpus", "80", "--memory", "512Gi",
          "--accelerators", "H200", "--docker-image", "trainer", "--preemptible",
          "--cmd", "python -m runtime.train cfg.yaml"]


class Outcome:
    """What `gkr` would give: its main() turns GkrError and RuntimeFailure into a message and
    the exit code of their category."""

    def __init__(self, output: str, exit_code: int, error: str = "") -> None:
        self.output, self.exit_code, self.error = output, exit_code, error


def gkr(*args: str) -> Outcome:
    result = runner.invoke(app, list(args))
    if isinstance(result.exception, GkrError):
        return Outcome(result.output, result.exception.exit_code, str(result.exception))
    if isinstance(result.exception, RuntimeFailure):
        return Outcome(result.output, int(result.exception.category), str(result.exception))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return Outcome(result.output, result.exit_code)


def pod(name: str, role: str, job: str = "train-a", phase: str = "Running", node: str = "n1"):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"gkr.dev/job": job, "gkr.dev/role": role}},
            "spec": {"containers": [{"name": "ray-worker" if role == "worker" else "main"}],
                     "nodeName": node},
            "status": {"phase": phase}}


def test_submit_applies_with_server_side_apply_and_reapplies(repo, apiserver):
    first = gkr(*SUBMIT)
    assert first.exit_code == 0 and "applied RayJob team-llm/train-a" in first.output
    obj = apiserver.get("ray.io", "rayjobs", NS, "train-a")
    assert obj["metadata"]["annotations"]["gkr.dev/owner"] == "tester@reve.ai"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "gkr-preemptible"
    # A GET first: gkr looks for an Argo CD-managed object of that name before applying.
    assert apiserver.requests[0].method == "GET"
    first = next(r for r in apiserver.requests if r.method != "GET")
    assert (first.method, first.content_type) == ("PATCH", "application/apply-patch+yaml")
    assert first.query["fieldManager"] == "gkr"
    again = gkr(*SUBMIT, "--pods", "3")
    assert again.exit_code == 0
    assert apiserver.get("ray.io", "rayjobs", NS, "train-a")["metadata"]["generation"] == 2


def test_bad_flags_name_the_flag_and_apply_conflicts_are_409(repo, apiserver):
    bad = gkr(*SUBMIT, "--accelerators", "B200")
    assert bad.exit_code == 1 and "--accelerator: 'B200' is not offered" in bad.error
    gkr(*SUBMIT)
    api = Kube.connect(CONTEXT)
    other = apiserver.get("ray.io", "rayjobs", NS, "train-a")
    edited = {"apiVersion": "ray.io/v1", "kind": "RayJob",
              "metadata": {"name": "train-a", "namespace": NS},
              "spec": {**other["spec"], "entrypoint": "edited by hand"}}
    with pytest.raises(Conflict, match="conflict") as error:
        api.apply(edited, force=False, field_manager="kubectl")
    assert error.value.status == 409 and error.value.reason == "Conflict"
    assert gkr(*SUBMIT).exit_code == 0  # gkr forces: the spec is the source of truth


def test_dry_run_prints_manifests_and_ships_the_working_dir(repo, apiserver, tmp_path):
    elsewhere = tmp_path / "elsewhere"  # outside the repository and the current directory
    elsewhere.mkdir()
    refused = gkr(*SUBMIT, "--working-dir", str(elsewhere), "--dry-run")
    assert refused.exit_code == 1 and "outside the repository" in refused.error
    code = repo / "code"  # the fixture's current directory is the repository
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "big.ckpt").write_text("x")
    (code / ".gitignore").write_text("*.ckpt\n")
    git.Repo.init(code).index.add(["train.py", ".gitignore"])
    result = gkr(*SUBMIT, "--working-dir", str(code), "--dry-run")
    assert result.exit_code == 0 and "kind: RayJob" in result.output
    assert "file://" in result.output and not apiserver.requests
    applied = gkr(*SUBMIT, "--working-dir", str(code))
    assert applied.exit_code == 0
    runtime_env = apiserver.get("ray.io", "rayjobs", NS, "train-a")["spec"]["runtimeEnvYAML"]
    uri = json.loads(runtime_env)["working_dir"]
    with zipfile.ZipFile(Path(uri.removeprefix("file://"))) as archive:
        assert archive.namelist() == [".gitignore", "train.py"]


def test_list_status_logs_and_delete(repo, apiserver):
    gkr(*SUBMIT)
    apiserver.put(pod("train-a-head-x", "head"))
    apiserver.put(pod("train-a-worker-a", "worker", node="gpu-1"))
    apiserver.put(pod("train-a-worker-b", "worker", phase="Pending", node=""))
    apiserver.put({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": "e1", "namespace": NS},
                   "involvedObject": {"name": "train-a-worker-b"}, "type": "Warning",
                   "reason": "FailedScheduling",
                   "message": "0/64 nodes are available: 64 Insufficient nvidia.com/gpu."})
    apiserver.put({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                   "metadata": {"name": "rayjob-train-a-1", "namespace": NS,
                                "ownerReferences": [{"name": "train-a", "kind": "RayJob"}]},
                   "status": {"conditions": [{"type": "Admitted", "status": "True"}]}})
    listed = json.loads(gkr("list", "--cluster", "usc1-prod", "-o", "json").output)
    assert [(r["name"], r["namespace"], r["phase"]) for r in listed] == [
        ("train-a", NS, "New")]
    status = json.loads(gkr("status", "train-a", "--cluster", "usc1-prod", "-n", NS,
                            "-o", "json").output)[0]
    assert status["admission"] == "admitted"
    assert {p["name"]: p["node"] for p in status["pods"]}["train-a-worker-a"] == "gpu-1"
    assert "FailedScheduling" in status["pending"][0]
    table = gkr("status", "train-a", "--cluster", "usc1-prod", "-n", NS)
    assert "Insufficient nvidia.com/gpu" in table.output

    apiserver.set_log(NS, "train-a-worker-b", "ray-worker", "step 1\n", follow=True)
    threading.Timer(0.3, lambda: apiserver.append_log(
        NS, "train-a-worker-b", "ray-worker", "step 2\n", end=True)).start()
    logs = gkr("logs", "train-a", "--cluster", "usc1-prod", "-n", NS, "--rank", "1", "-f")
    assert logs.output.splitlines() == ["step 1", "step 2"]

    assert gkr("delete", "train-a", "--cluster", "usc1-prod", "-n", NS).exit_code == 0
    assert apiserver.get("ray.io", "rayjobs", NS, "train-a") is None
    missing = gkr("delete", "train-a", "--cluster", "usc1-prod", "-n", NS)
    assert missing.exit_code == 1


def test_raycluster_delete_needs_explicit_request(repo, apiserver):
    gkr("submit", "-f", "jobs/llm/llm-dev.yaml", "--cluster", "usc1-prod", "--accelerators",
        "H200")
    assert apiserver.get("apps", "deployments", NS, "llm-dev-sentinel") is not None
    refused = gkr("delete", "llm-dev", "--cluster", "usc1-prod", "-n", NS)
    assert refused.exit_code == 1 and apiserver.get("ray.io", "rayclusters", NS, "llm-dev")
    done = gkr("delete", "llm-dev", "--cluster", "usc1-prod", "-n", NS, "--raycluster", "--yes")
    assert done.exit_code == 0
    assert apiserver.get("ray.io", "rayclusters", NS, "llm-dev") is None
    assert apiserver.get("apps", "deployments", NS, "llm-dev-sentinel") is None


def test_check_runs_a_preflight_job_on_the_node_and_reads_its_result(repo, apiserver):
    apiserver.put({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "gpu-7", "labels": {"cloud.google.com/gke-accelerator": "nvidia-h200-141gb"}}})
    result = {"node": "gpu-7", "passed": False, "figures": {}, "findings": [
        {"check": "kernel", "severity": "error", "message": "xid-79 GPU has fallen off the bus"}]}

    def controller():  # plays the Job controller and the kubelet
        for _ in range(100):
            jobs = apiserver.objects("batch", "jobs")
            if jobs:
                job = jobs[0]
                label = job["metadata"]["labels"]["gkr.dev/job"]
                # The kubelet writes the log before the pod is reported finished.
                apiserver.set_log(NS, "check-pod", "main", "starting\n" + json.dumps(result))
                apiserver.put(pod("check-pod", "job", job=label, phase="Failed", node="gpu-7"))
                return
            threading.Event().wait(0.05)

    threading.Thread(target=controller, daemon=True).start()
    out = gkr("check", "gpu-7", "--cluster", "usc1-prod", "-n", NS, "--timeout", "30")
    assert out.exit_code == 5 and "fallen off the bus" in out.output
    job = apiserver.history("batch", "jobs")[0].object
    container = job["spec"]["template"]["spec"]["containers"][0]
    expect = json.loads(next(e["value"] for e in container["env"] if e["name"] == "GKR_PREFLIGHT"))
    assert expect["gpus"] == 8 and expect["transport_env"]
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-7"}


def test_kubectl_argv_and_pod_selection():
    pods = [pod("j-head", "head"), pod("j-worker-b", "worker"), pod("j-worker-a", "worker")]
    assert select_pod(pods)["metadata"]["name"] == "j-head"
    assert select_pod(pods, rank=0)["metadata"]["name"] == "j-worker-a"
    assert select_pod(pods, name="j-worker-b")["metadata"]["name"] == "j-worker-b"
    kubectl = Kubectl("ctx", NS)
    argv = kubectl.exec_argv("j-head", ["/bin/bash"], "main", interactive=True)
    assert argv[1:] == ["--context", "ctx", "--namespace", NS, "exec", "-it", "j-head", "-c",
                        "main", "--", "/bin/bash"]
    assert kubectl.port_forward_argv("j-head", ["8265:8265"])[-2:] == ["pod/j-head", "8265:8265"]
    assert kubectl.cp_argv("a", "j-head:/b")[-2:] == ["a", "j-head:/b"]


def test_submit_waits_for_the_placed_pods(repo, apiserver):
    """The wait for placed pods (`gkr shell` waits so for a new development pod)."""
    from generator.cluster.preflight import wait_running

    gkr(*SUBMIT)
    api = Kube.connect(CONTEXT)
    seen: list[str] = []

    def kubelet():
        for name, role in (("train-a-head", "head"), ("train-a-w0", "worker"),
                           ("train-a-w1", "worker")):
            threading.Event().wait(0.2)
            apiserver.put(pod(name, role))

    threading.Thread(target=kubelet, daemon=True).start()
    running = wait_running(api, NS, "train-a", 3, 60, seen.append)
    assert sorted(p["metadata"]["name"] for p in running) == [
        "train-a-head", "train-a-w0", "train-a-w1"]
    assert seen and seen[0].startswith("train-a: ")


def test_shell_starts_a_development_pod_when_none_exists(repo, apiserver, monkeypatch):
    """`gkr shell NAME` creates the dev Job, waits for its pod, then execs into it; the exec
    itself needs a real cluster, so kubectl's run is replaced by a recorder here."""
    ran: list[list[str]] = []
    monkeypatch.setattr(Kubectl, "run", lambda self, argv, capture=False: (
        ran.append(argv) or type("Done", (), {"returncode": 0})()))

    def kubelet():  # the Job controller and scheduler: a running pod once the Job exists
        while apiserver.get("batch", "jobs", NS, "scratch") is None:
            threading.Event().wait(0.05)
        apiserver.put(pod("scratch-0", "job", job="scratch"))

    threading.Thread(target=kubelet, daemon=True).start()
    outcome = gkr("shell", "scratch", "--cluster", "usc1-prod", "--namespace", NS,
                  "--accelerators", "H100-Mega", "--gpus", "1")
    assert outcome.exit_code == 0, outcome.output + outcome.error
    created = apiserver.get("batch", "jobs", NS, "scratch")
    container = created["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c", "sleep infinity"]  # cmd is a shell line
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert created["spec"]["activeDeadlineSeconds"] == 8 * 3600
    (argv,) = ran
    assert argv[-6:] == ["-it", "scratch-0", "-c", "main", "--", "/bin/bash"]


def test_preflight_expects_the_gpus_the_pod_was_given(repo):
    """A 1-GPU development pod sees one GPU; the node check Job takes the whole node."""
    host = Catalog(repo).accelerators["H200"].host
    assert host.expectations(gpus=1)["gpus"] == 1
    assert host.expectations(node="n1") | {"node": "n1", "gpus": 8} == host.expectations(node="n1")


def gate_record(attempt: int, next_step: Next, passed: bool = False) -> GateRecord:
    suspects = [] if passed else [Suspect(node="gpu-7", pod="train-a-workers-x",
                                          reason="all-reduce: injected fault")]
    return GateRecord(passed=passed, attempt=attempt, attempts=2, at="2026-01-01T00:00:00Z",
                      pods=2, backend="nccl", busbw_gbps=None, min_busbw_gbps=160.0,
                      suspects=suspects, next=next_step,
                      message="all-reduce over 2 pods (16 ranks, nccl): no bandwidth")


def annotate_preflight(record: GateRecord) -> None:
    """What Warden's preflight activity writes on the RayJob: a merge patch of the annotation
    (runtime.warden.cluster.KubeCluster.annotate)."""
    note = {"metadata": {"annotations": {Annotation.PREFLIGHT: record.model_dump_json()}}}
    Kube.connect(CONTEXT).patch(RAYJOB, "train-a", note, namespace=NS)


def test_status_shows_the_preflight_result(repo, apiserver):
    assert gkr(*SUBMIT).exit_code == 0
    scope = ["--cluster", "usc1-prod", "-n", NS]
    assert "preflight:" not in gkr("status", "train-a", *scope).output
    annotate_preflight(gate_record(2, "teardown"))
    table = gkr("status", "train-a", *scope).output
    assert "preflight: FAILED (attempt 2/2, 2026-01-01T00:00:00Z; next: teardown)" in table
    assert "suspect: gpu-7 (pod train-a-workers-x): all-reduce: injected fault" in table
    (report,) = json.loads(gkr("status", "train-a", *scope, "-o", "json").output)
    assert report["preflight"]["suspects"][0]["node"] == "gpu-7"


def test_submit_wait_only_watches_the_preflight_and_exits_5_on_failure(repo, apiserver):
    def warden():  # the gate's two results, as Warden records them
        wait_until(lambda: apiserver.get("ray.io", "rayjobs", NS, "train-a"), 60, "the RayJob")
        annotate_preflight(gate_record(1, "retry"))
        annotate_preflight(gate_record(2, "teardown"))

    threading.Thread(target=warden, daemon=True).start()
    done = gkr(*SUBMIT, "--wait", "--timeout", "60")
    assert done.exit_code == 5, done.output + done.error
    assert "preflight of train-a failed" in done.error
    assert "preflight: FAILED (attempt 2/2" in done.output
    assert apiserver.get("ray.io", "rayjobs", NS, "train-a") is not None  # gkr deletes nothing
