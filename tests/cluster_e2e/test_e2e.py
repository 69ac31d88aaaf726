"""`gkr` against a real GKE cluster: what the Kubernetes API test double cannot prove — the
scheduler places the pods, exec/cp/port-forward stream over SPDY/WebSocket, deletion propagates
to the pods, `gkr check` runs the preflight suite in a Job on a named node.

Skipped unless GKR_E2E_KUBECONFIG names a kubeconfig (see conftest.py). The steps run in file
order on one run's job; the finalizer of the `run` fixture deletes what they created. `gkr
check` runs after `gkr delete`: its Job takes every GPU of the node, so the development Job
must first release its GPU.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from generator.cluster.preflight import wait_running
from runtime.identity import selector
from runtime.kube import JOB, POD, RAYCLUSTER
from tests.cluster_e2e.conftest import (
    ENABLED,
    GKR,
    KUBECONFIG,
    ROOT,
    SKIP_REASON,
    WAIT_S,
    Run,
    eventually,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not ENABLED, reason=SKIP_REASON)]


def ok(done: subprocess.CompletedProcess[str], *codes: int) -> subprocess.CompletedProcess[str]:
    assert done.returncode in (codes or (0,)), (
        f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


def test_submit_job(run: Run) -> None:
    done = ok(run.gkr("submit", run.job, "job", *run.scope(), "--accelerators", run.accelerator,
                      "--gpus", "1", "--docker-image", "devbox", "--cmd", "sleep 600"))
    assert f"applied Job {run.namespace}/{run.job}" in done.stdout


def test_status_shows_running_pod_on_a_node(run: Run) -> None:
    done = ok(run.gkr("status", run.job, *run.scope(), "-o", "json"))
    (report,) = json.loads(done.stdout)
    assert report["phase"] == "Running", report
    placed = [p for p in report["pods"] if p["phase"] == "Running" and p["node"] != "-"]
    assert placed, report["pods"]
    run.found["node"] = placed[0]["node"]


def test_logs_tail(run: Run) -> None:
    ok(run.gkr("logs", run.job, *run.scope(), "--tail", "5"))


def test_shell_runs_a_command(run: Run) -> None:
    ok(run.gkr("shell", run.job, *run.scope(), "--command", "true"))


def test_cp_round_trip(run: Run, tmp_path: Path) -> None:
    sent, back = tmp_path / "sent.bin", tmp_path / "back.bin"
    sent.write_bytes(secrets.token_bytes(4096))
    ok(run.gkr("cp", run.job, str(sent), ":/tmp/x", *run.scope()))
    ok(run.gkr("cp", run.job, ":/tmp/x", str(back), *run.scope()))
    assert back.read_bytes() == sent.read_bytes()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(url: str, forwarder: subprocess.Popen[bytes]) -> bool:
    if forwarder.poll() is not None:
        pytest.fail(f"gkr port-forward exited {forwarder.returncode} before the dashboard answered")
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return bool(response.status == 200 and json.loads(response.read()))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _wait_head(run: Run) -> None:
    """Running pods until the head is one of them (the worker or sentinel may come first)."""
    def head_running() -> bool:
        pods = wait_running(run.api, run.namespace, run.ray, 1, WAIT_S, print)
        return any(p["metadata"]["labels"].get("gkr.dev/role") == "head" for p in pods)
    eventually(head_running, f"head pod of {run.ray} running", WAIT_S)


def test_port_forward_reaches_the_ray_dashboard(run: Run) -> None:
    ok(run.gkr("submit", run.ray, "raycluster", *run.scope(), "--pods", "1",
               "--docker-image", "gkr-runtime"))
    _wait_head(run)
    port = _free_port()
    argv = [GKR, "port-forward", run.ray, *run.scope(), "--service", "dashboard",
            "--local-port", str(port)]
    # A session of its own, so stopping it also stops the kubectl it runs.
    forwarder = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, "KUBECONFIG": KUBECONFIG},
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/api/version"
        eventually(lambda: _answers(url, forwarder), f"{url} through gkr port-forward", 120)
    finally:
        os.killpg(forwarder.pid, signal.SIGTERM)
        forwarder.wait(timeout=30)
    ok(run.gkr("delete", run.ray, *run.scope(), "--raycluster", "--yes"))
    eventually(lambda: run.api.find(RAYCLUSTER, run.ray, namespace=run.namespace) is None,
               f"RayCluster {run.ray} deleted")


def test_delete_removes_the_job_and_its_pods(run: Run) -> None:
    ok(run.gkr("delete", run.job, *run.scope(), "--yes"))
    eventually(lambda: run.api.find(JOB, run.job, namespace=run.namespace) is None,
               f"Job {run.job} gone")
    eventually(lambda: not run.api.list(POD, namespace=run.namespace,
                                        labels=selector(job=run.job)),
               f"pods of {run.job} gone (not orphaned)", WAIT_S)


def test_check_the_node_the_job_ran_on(run: Run) -> None:
    node = run.found["checked"] = run.need("node")
    done = ok(run.gkr("check", node, *run.scope(), "-o", "json", "--timeout", str(WAIT_S)), 0, 5)
    results = json.loads(done.stdout)
    assert [r["node"] for r in results] == [node]
    assert results[0]["passed"] is (done.returncode == 0)
