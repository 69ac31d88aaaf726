"""The sentinel against a real local Ray head (testing/ray.py, ray_head): it asks the head's API
(GCS health, nodes, jobs), so a head whose GCS is wedged (stopped with SIGSTOP: its port still
accepts TCP connections) is reported unhealthy; it counts idle time and tells the owner past
the threshold; `gkr status` shows its latest report."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import pytest
from ray.job_submission import JobSubmissionClient

from runtime.errors import ConfigError
from runtime.identity import Env
from runtime.sentinel import (
    SentinelConfig,
    ask_head,
    last_report,
    parse_args,
    store_events,
    watch,
)
from runtime.telemetry.store import Store
from runtime.telemetry.ui import data as ui_data
from testing.ray import LocalHead, dashboard_missing, ray_head
from testing.wait import wait_until
from tests.cli.conftest import NS, gkr

T = TypeVar("T")


def needs_head(test: T) -> T:
    """A test on the real local head: slow, and skipped where Ray's dashboard cannot start."""
    skip = pytest.mark.skipif(dashboard_missing() is not None, reason=dashboard_missing() or "")
    return pytest.mark.slow(skip(test))


@pytest.fixture(scope="module")
def head() -> Iterator[LocalHead]:
    with ray_head() as local:
        yield local


@contextmanager
def wedged(head: LocalHead) -> Iterator[None]:
    """The head's GCS stopped (not killed) while the block runs: a hung GCS, as a deadlock or a
    stalled disk leaves it; the kernel still completes TCP handshakes on its port."""
    (gcs,) = head.processes("gcs_server")
    os.kill(gcs, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(gcs, signal.SIGCONT)
        settled(head)


def settled(head: LocalHead) -> None:
    """Until the head answers healthy three probes running (a resumed GCS catches up with
    its raylet and dashboard first)."""
    config = SentinelConfig(dashboard=head.url, timeout_s=10)
    streak = [0]

    def steady() -> bool:
        streak[0] = streak[0] + 1 if ask_head(config).healthy else 0
        return streak[0] >= 3

    wait_until(steady, 120, "the resumed head to be healthy", interval=0.2)


class Clock:
    """Time that moves only when the sentinel sleeps: idle hours in no time, deterministic."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@needs_head
def test_a_wedged_head_is_unhealthy_though_its_port_answers(head) -> None:
    config = SentinelConfig(dashboard=head.url, name="llm-dev", timeout_s=10)
    healthy = ask_head(config)
    assert healthy.healthy and healthy.nodes_alive == 1 and healthy.jobs_active == 0
    host, port = head.gcs.rsplit(":", 1)
    with wedged(head):
        with socket.create_connection((host, int(port)), timeout=5):
            pass  # what the old TCP probe checked: still "reachable"
        report = ask_head(config)
        assert not report.healthy and "503" in report.reason, report
        lines: list[str] = []
        exited = watch(config.model_copy(update={"failures": 2, "max_probes": 5}),
                       sleep=lambda _: None, emit=lines.append)
    assert exited == 1 and len(lines) == 1  # one report: the state did not change
    said = json.loads(lines[0])
    assert said["sentinel"] == "llm-dev" and not said["healthy"]
    assert ask_head(config).healthy  # resumed (and settled): healthy again


@needs_head
def test_idle_past_the_threshold_tells_the_owner_once(head, caplog) -> None:
    settled(head)
    clock, lines = Clock(), []
    config = SentinelConfig(dashboard=head.url, name="llm-dev", owner="alice@reve.ai",
                            interval_s=600, idle_after_s=3600, report_every_s=1800,
                            max_probes=9)
    with caplog.at_level(logging.WARNING, logger="gkr.sentinel"):
        assert watch(config, sleep=clock.sleep, clock=lambda: clock.now,
                     emit=lines.append) == 0
    reports = [json.loads(line) for line in lines]
    # the first, one due every 30 min, and the change at the threshold
    assert [r["idle_s"] for r in reports] == [0, 1800, 3600], reports
    assert [r["idle_past"] for r in reports] == [False, False, True]
    (notice,) = [r.getMessage() for r in caplog.records]
    assert notice.startswith("RayCluster llm-dev (alice@reve.ai) has run no job for 1h00m")
    assert "`gkr delete llm-dev --raycluster` frees it" in notice

    client = JobSubmissionClient(head.url)
    job = client.submit_job(entrypoint=f"{sys.executable} -c 'import time; time.sleep(600)'")
    try:
        busy = ask_head(config)
        assert busy.jobs_active == 1 and busy.jobs_total == 1
        lines.clear()
        watch(config.model_copy(update={"max_probes": 1}), sleep=clock.sleep,
              clock=lambda: clock.now, emit=lines.append)
        assert json.loads(lines[0])["idle_s"] is None  # a running job: not idle
    finally:
        client.stop_job(job)
        wait_until(lambda: client.get_job_status(job).is_terminal(), 120, "the job to stop")


@needs_head
def test_gkr_status_shows_the_sentinels_report(head, repo, apiserver) -> None:
    made = gkr("submit", "-f", "jobs/llm/llm-dev.yaml", "--cluster", "usc1-prod",
               "--accelerators", "H200")
    assert made.code == 0, made.err
    lines: list[str] = []
    with wedged(head):
        watch(SentinelConfig(dashboard=head.url, name="llm-dev", failures=1),
              sleep=lambda _: None, emit=lines.append)
    apiserver.put({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "llm-dev-sentinel-x", "namespace": NS,
                                "labels": {"gkr.dev/job": "llm-dev", "gkr.dev/role": "sentinel"}},
                   "spec": {"containers": [{"name": "sentinel"}]},
                   "status": {"phase": "Running"}})
    apiserver.set_log(NS, "llm-dev-sentinel-x", "sentinel", "starting\n" + "\n".join(lines))
    shown = gkr("status", "llm-dev", "--cluster", "usc1-prod", "-n", NS)
    assert shown.code == 0, shown.err
    assert "sentinel at " in shown.out and ": UNHEALTHY: HTTP 503" in shown.out
    data = json.loads(gkr("status", "llm-dev", "--cluster", "usc1-prod", "-n", NS,
                          "-o", "json").out)[0]
    assert data["sentinel"]["healthy"] is False


@needs_head
def test_changes_of_state_reach_the_store_gkr_ui_reads(head, tmp_path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    store = store_events({Env.TELEMETRY_DSN: dsn, Env.CLUSTER: "usc1-prod",
                          Env.NAMESPACE: NS, Env.JOB: "llm-dev", Env.KIND: "raycluster"})
    assert store is not None
    config = SentinelConfig(dashboard=head.url, name="llm-dev", failures=1, max_probes=1)

    def record(report):
        store.write("events", report.event(config))

    with wedged(head):
        watch(config, sleep=lambda _: None, emit=lambda _: None, record=record)
    watch(config, sleep=lambda _: None, emit=lambda _: None, record=record)
    store.close()
    with Store.connect(dsn) as opened:
        shown = ui_data.events(opened)  # what gkr-ui's events list shows, newest first
    assert [(e["source"], e["object_name"], e["reason"], e["severity"]) for e in shown] == [
        ("sentinel", "llm-dev", "RayClusterHealthy", "Normal"),
        ("sentinel", "llm-dev", "RayClusterUnhealthy", "Warning")]
    assert shown[1]["message"].startswith("UNHEALTHY: HTTP 503")


def test_reports_are_found_in_a_log_and_look_alikes_are_not() -> None:
    line = json.dumps({"sentinel": "x", "time": "t", "healthy": True, "reason": "",
                       "nodes_alive": 1, "nodes_dead": 0, "jobs_active": 0, "jobs_total": 0,
                       "idle_s": 5.0, "idle_past": False, "summary": "healthy: …"})
    assert last_report(["boot", line, "INFO something"])["idle_s"] == 5.0
    assert last_report(['{"sentinel": "x", "other": 1}', "{not json"]) is None


def test_flags_are_checked_and_errors_name_them() -> None:
    with pytest.raises(ConfigError, match="dashboard"):
        parse_args(["--dashboard", "head:8265"])
    with pytest.raises(ConfigError, match="failures"):
        parse_args(["--dashboard", "http://h:1", "--failures", "0"])
    assert parse_args(["--dashboard", "http://h:1/", "--idle-after", "60"]).idle_after_s == 60


def test_module_exit_code_as_kubernetes_sees_it() -> None:
    dead = subprocess.run([sys.executable, "-m", "runtime.sentinel", "--dashboard",
                           f"http://127.0.0.1:{closed_port()}", "--interval", "0.01",
                           "--failures", "2", "--name", "gone"],
                          capture_output=True, text=True, timeout=120)
    assert dead.returncode == 1 and "unhealthy for 2 consecutive probes" in dead.stderr
    assert not json.loads(dead.stdout.splitlines()[0])["healthy"]
    bad = subprocess.run([sys.executable, "-m", "runtime.sentinel", "--dashboard", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
