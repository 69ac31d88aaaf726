"""A Warden worker killed in the middle of recovery: the workflow resumes on a new worker.

The worker runs as `python -m runtime.warden` in a child process that the test kills with
SIGKILL while the stress test runs (after the reboot). Kubernetes, Prometheus and Compute
Engine are HTTP doubles (testing/doubles/kube_apiserver.py, testing/warden.py); Temporal is the
real dev server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtime.warden.model import Trigger
from runtime.warden.triggers import trigger_node
from testing.warden import gpu_node, is_stress
from tests.warden.conftest import fast_config
from tests.warden.test_warden_flow import result, wait_for

pytestmark = pytest.mark.slow


def start_worker(config_path: Path, log: Path) -> subprocess.Popen:
    """A Warden worker process, as the Deployment runs it."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "runtime.warden", "--config", str(config_path)],
            stdout=sink, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2],
        )


def test_killed_worker_resumes_without_a_second_reboot(loop, temporal, doubles, check_jobs,
                                                        tmp_path):
    kube, _, gcp = doubles
    kube.put(gpu_node("gpu-kill"))
    # The stress test runs long enough to kill the worker while it waits on it.
    check_jobs.plan = lambda node, argv: (
        True, '{"findings": []}', 6.0 if is_stress(argv) else 0)
    config = fast_config(temporal, doubles, tmp_path)
    config_path = tmp_path / "warden.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    log = tmp_path / "worker.log"

    first = start_worker(config_path, log)
    try:
        loop.run(trigger_node(temporal.client, config, "gpu-kill",
                              Trigger("fault", "Xid 79", "test")))
        wait_for("the stress test to start", lambda: any(
            is_stress(j["spec"]["template"]["spec"]["containers"][0]["command"])
            for j in kube.objects("batch", "jobs")), timeout=90)
        assert gcp.executions("reset") == ["gpu-kill"]
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)

    second = start_worker(config_path, log)
    try:
        incident = result(loop, temporal, "gpu-kill")
    finally:
        second.send_signal(signal.SIGINT)
        try:
            second.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(second.pid, signal.SIGKILL)
            second.wait(10)

    assert incident.phase == "healthy", log.read_text()[-2000:]
    resets = [c for c in gcp.calls if c.path.endswith("/gpu-kill/reset")]
    assert len(resets) == 1  # not even a de-duplicated second request
    assert gcp.executions("reset") == ["gpu-kill"]
    stress_jobs = [j for j in kube.objects("batch", "jobs")
                   if is_stress(j["spec"]["template"]["spec"]["containers"][0]["command"])]
    assert len(stress_jobs) == 1  # the retried activity joined the Job already running
