"""`gkr ray submit/jobs/logs/stop/scale` on a held RayCluster: its object lives on the
Kubernetes API double, its head is a real local Ray head (testing/ray.py, ray_head) whose job
API gkr reaches through a port-forward it opens and closes itself, or at an address given.
Three jobs run on the one cluster, one after another, without a new Ray runtime."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import generator.cluster.kubectl as kubectl_module
from runtime.sentinel import SentinelConfig, watch
from testing.ray import dashboard_missing, ray_head
from testing.wait import wait_until
from tests.cli.conftest import NS, gkr

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(dashboard_missing() is not None,
                                 reason=dashboard_missing() or "")]
SCOPE = ["--cluster", "usc1-prod", "-n", NS]
SHOW = """import json, os
print("GREETING", os.environ.get("GREETING"))
print("CODE", open("marker.txt").read().strip())
print("IDENTITY", json.dumps({k: v for k, v in os.environ.items() if k.startswith("GKR_")}))
"""
# `kubectl port-forward` for the double (which speaks no SPDY): it says it forwards to the
# local head's dashboard, as kubectl does, records its argv and waits to be stopped.
FAKE_KUBECTL = """#!{python}
import json, signal, sys, time
with open({record!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
print("Forwarding from 127.0.0.1:{port} -> 8265", flush=True)
print("Forwarding from [::1]:{port} -> 8265", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(3600)
"""


@dataclass(frozen=True)
class Held:
    apiserver: Any
    record: Path
    """Where the fake kubectl writes the argv of each port-forward gkr opened."""


@pytest.fixture(scope="module")
def head():
    with ray_head() as local:
        yield local.url


@pytest.fixture
def held(repo, apiserver, head, tmp_path, monkeypatch):
    """The RayCluster llm-dev applied by gkr, its head pod placed, kubectl faked."""
    made = gkr("submit", "-f", "jobs/llm/llm-dev.yaml", *SCOPE[:2], "--accelerators", "H200")
    assert made.code == 0, made.err
    apiserver.put({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "llm-dev-head-x", "namespace": NS,
                                "labels": {"gkr.dev/job": "llm-dev", "gkr.dev/role": "head"}},
                   "spec": {"containers": [{"name": "ray-head"}]}, "status": {"phase": "Running"}})
    record = tmp_path / "kubectl-calls.jsonl"
    fake = tmp_path / "kubectl"
    fake.write_text(FAKE_KUBECTL.format(python=sys.executable, record=str(record),
                                        port=head.rsplit(":", 1)[1]))
    fake.chmod(0o755)
    monkeypatch.setattr(kubectl_module, "kubectl", lambda: str(fake))
    return Held(apiserver, record)


def _status(job: str) -> str:
    listed = gkr("ray", "jobs", "llm-dev", *SCOPE, "-o", "json")
    assert listed.code == 0, listed.err
    return next((row["status"] for row in json.loads(listed.out) if row["id"] == job), "")


def _finished(job: str) -> str:
    return wait_until(lambda: _status(job) in ("SUCCEEDED", "FAILED", "STOPPED")
                      and _status(job), 180, f"ray job {job} to finish")


def _forwarders_closed(record: Path) -> None:
    """Every port-forward gkr opened went to the head pod's dashboard, and none is left."""
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls and all(c[-2:] == ["pod/llm-dev-head-x", ":8265"] for c in calls)
    assert all("--address" in c and c[c.index("--address") + 1] == "127.0.0.1" for c in calls)
    mine = [p for p in os.listdir("/proc") if p.isdigit()
            and str(record.parent / "kubectl") in _cmdline(p)]
    assert not mine, f"port-forwards still running: {mine}"


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def test_three_jobs_one_after_another_on_one_cluster(held, head, repo, tmp_path) -> None:
    code = repo / "code"
    code.mkdir()
    (code / "show.py").write_text(SHOW)
    (code / "marker.txt").write_text("shipped\n")
    env = tmp_path / "env.yaml"
    env.write_text('GREETING: "hello"\n')

    first = gkr("ray", "submit", "llm-dev", *SCOPE, "--cmd", f"{sys.executable} show.py",
                "--working-dir", str(code), "--env", str(env), "--id", "llm-dev-one")
    assert first.code == 0 and first.out.strip() == "llm-dev-one", first.err
    assert _finished("llm-dev-one") == "SUCCEEDED"
    log = gkr("ray", "logs", "llm-dev", "llm-dev-one", *SCOPE).out
    assert "GREETING hello" in log and "CODE shipped" in log
    identity = json.loads(log.split("IDENTITY ", 1)[1].splitlines()[0])
    assert identity["GKR_RUN"] == "llm-dev-one"  # the submission is the run
    assert {k: identity[k] for k in ("GKR_CLUSTER", "GKR_NAMESPACE", "GKR_TEAM", "GKR_JOB",
                                     "GKR_KIND")} == {
        "GKR_CLUSTER": "usc1-prod", "GKR_NAMESPACE": NS, "GKR_TEAM": "llm",
        "GKR_JOB": "llm-dev", "GKR_KIND": "raycluster"}

    sleeper = gkr("ray", "submit", "llm-dev", *SCOPE, "--cmd",
                  f"{sys.executable} -c 'import time; print(\"waiting\", flush=True); "
                  "time.sleep(600)'")
    second = sleeper.out.strip()
    assert sleeper.code == 0 and second.startswith("llm-dev-"), sleeper.err
    wait_until(lambda: _status(second) == "RUNNING", 120, "the second job to run")
    stopped = gkr("ray", "stop", "llm-dev", second, *SCOPE)
    assert stopped.code == 0 and stopped.out.strip() == f"{second}: STOPPED"
    assert _finished(second) == "STOPPED"

    third = gkr("ray", "submit", "llm-dev", *SCOPE, "--address", head, "--id", "llm-dev-three",
                "--cmd", "echo line-1; echo line-2; exit 3")
    assert third.code == 0, third.err
    streamed = gkr("ray", "logs", "llm-dev", "llm-dev-three", *SCOPE, "-f")
    assert "line-1" in streamed.out and "line-2" in streamed.out
    assert _finished("llm-dev-three") == "FAILED"
    saved = tmp_path / "three.log"
    assert gkr("ray", "logs", "llm-dev", "llm-dev-three", *SCOPE, "-O", str(saved)).code == 0
    assert "line-2" in saved.read_text()

    listed = json.loads(gkr("ray", "jobs", "llm-dev", *SCOPE, "-o", "json").out)
    assert [(r["id"], r["status"]) for r in listed] == [
        ("llm-dev-one", "SUCCEEDED"), (second, "STOPPED"), ("llm-dev-three", "FAILED")]
    _forwarders_closed(held.record)


def test_mistakes_are_reported_not_raised(held, head, tmp_path) -> None:
    missing = gkr("ray", "jobs", "no-such-cluster", *SCOPE)
    assert missing.code == 1 and "no RayCluster named 'no-such-cluster'" in missing.err
    unknown = gkr("ray", "logs", "llm-dev", "no-such-job", *SCOPE)
    assert unknown.code == 1 and "Traceback" not in unknown.err
    assert gkr("ray", "submit", "llm-dev", *SCOPE, "--cmd", "true", "--id", "taken").code == 0
    again = gkr("ray", "submit", "llm-dev", *SCOPE, "--cmd", "true", "--id", "taken")
    assert again.code == 1 and "already exists" in again.err
    bad_env = tmp_path / "bad.yaml"
    bad_env.write_text(textwrap.dedent("""\
        GKR_RUN: "mine"
        COUNT: 3
    """))
    refused = gkr("ray", "submit", "llm-dev", *SCOPE, "--cmd", "true", "--env", str(bad_env))
    assert refused.code == 1
    assert "GKR_RUN: GKR_* variables are set by GKR" in refused.err
    assert "COUNT: 3 is not a string; quote it" in refused.err
    unreachable = gkr("ray", "jobs", "llm-dev", *SCOPE, "--address", "http://127.0.0.1:9")
    assert unreachable.code == 4 and "Traceback" not in unreachable.err


def test_hold_run_scale_watch_and_delete(held, head) -> None:
    """The issue's whole story on one RayCluster, all through gkr."""
    ran = gkr("ray", "submit", "llm-dev", *SCOPE, "--id", "llm-dev-story", "--cmd", "echo done")
    assert ran.code == 0, ran.err
    assert _finished("llm-dev-story") == "SUCCEEDED"
    scaled = gkr("ray", "scale", "llm-dev", "--replicas", "3", *SCOPE)
    assert scaled.code == 0 and "2 -> 3 workers (24 GPUs)" in scaled.out, scaled.err
    lines: list[str] = []
    watch(SentinelConfig(dashboard=head, name="llm-dev", max_probes=1), sleep=lambda _: None,
          emit=lines.append)
    apiserver = held.apiserver
    apiserver.put({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "llm-dev-sentinel-x", "namespace": NS,
                                "labels": {"gkr.dev/job": "llm-dev", "gkr.dev/role": "sentinel"}},
                   "spec": {"containers": [{"name": "sentinel"}]},
                   "status": {"phase": "Running"}})
    apiserver.set_log(NS, "llm-dev-sentinel-x", "sentinel", "\n".join(lines))
    shown = gkr("status", "llm-dev", *SCOPE)
    assert shown.code == 0 and "sentinel at " in shown.out, shown.err
    assert ": healthy: 1 nodes alive, 0 dead, 0 of " in shown.out
    gone = gkr("delete", "llm-dev", *SCOPE, "--raycluster", "--yes")
    assert gone.code == 0 and apiserver.get("ray.io", "rayclusters", NS, "llm-dev") is None
    _forwarders_closed(held.record)
