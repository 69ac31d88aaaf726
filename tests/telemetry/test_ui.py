"""gkr-ui's JSON API and server (runtime.telemetry.ui), without a browser: `gkr ui` runs as a
real process on a real chDB store filled with a small synthetic run, and is asked over HTTP.

The browser half is test_ui_browser.py; it reuses `fill_store` and `UiProcess` from here.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest

from runtime.telemetry.store import Store
from runtime.telemetry.ui import data
from runtime.warden.model import Trigger
from runtime.warden.triggers import trigger_node
from testing.doubles.kube_apiserver import KubeApiServer
from testing.wait import WaitTimeout, wait_until
from testing.warden import gpu_node
from tests.warden.conftest import RunningWorker, fast_config
from tests.warden.test_warden_flow import result

ROOT = Path(__file__).resolve().parents[2]
GKR = str(Path(sys.executable).parent / "gkr")  # the console script, as a user runs it
# An hour ago, on a 5-minute boundary (so windows align): recent, since the tables' TTLs drop
# old rows (collectives after 30 days) as they are written.
# The child process that fills the store imports this module again: it gets the parent's T0.
_T0_ENV = "GKR_TEST_UI_T0"
_HOUR_AGO = datetime.now(UTC) - timedelta(hours=1)
T0 = (datetime.fromisoformat(os.environ[_T0_ENV]) if _T0_ENV in os.environ else
      _HOUR_AGO.replace(minute=_HOUR_AGO.minute // 5 * 5, second=0, microsecond=0))
RUN = "synthetic-run"
STRAGGLER = 2  # the rank that arrives late at every all-reduce
RANKS = 4
STEPS = 60
STEP_S = 3  # 60 steps of 3 s: 180 s, six 30 s windows
TOKENS = 32 * 128  # a rank's tokens a step: 32 samples of 128
FLOPS_PER_TOKEN = 6e9  # a 1 B-parameter model
PEAK_FLOPS = 989e12  # an H100's dense bf16 peak
GIB = 2**30
EVIL = '<img src="a/b" onerror="window.__pwned=1">'  # a run name that must stay text
EVIL_MESSAGE = "<script>window.__pwned=2</script><b>bold</b> & done"


# In the full parallel suite (pytest-xdist) a `gkr ui` started by these tests gave no
# answer within 60 s, twice; they pass alone and as a module under -n 2. Cause open
# (issue 24).
UNANSWERED_IN_FULL_SUITE = pytest.mark.xfail(
    reason="gkr ui gives no answer within 60 s in the full parallel suite (open)",
    strict=False)


def _identity(run: str, rank: int, role: str = "worker") -> dict[str, Any]:
    pod = f"{run[:20]}-worker-{rank}" if rank >= 0 else f"{run[:20]}-head"
    return {"cluster": "local", "namespace": "team-llm", "team": "llm", "job": "tiny",
            "kind": "rayjob", "run": run, "learner": "", "replica_group": -1, "rank": rank,
            "role": role, "pod": pod, "node": f"node-{max(rank, 0) // 2}"}


def _steps(run: str, steps: int) -> list[dict[str, Any]]:
    rows = []
    for step in range(steps):
        for rank in range(RANKS):
            step_time = 0.5 + (0.05 if rank == STRAGGLER else 0.0) + 0.01 * math.sin(step / 8)
            rows.append({**_identity(run, rank), "ts": T0 + timedelta(seconds=step * STEP_S),
                         "step": step, "loss": 2.5 * math.exp(-step / 20) + 0.1 + 0.02 * rank,
                         "step_time_s": step_time, "samples_per_s": 32 / step_time,
                         "tokens_per_s": TOKENS / step_time, "tokens": TOKENS,
                         "mfu": TOKENS / step_time * FLOPS_PER_TOKEN / PEAK_FLOPS,
                         "cuda_peak_allocated_bytes": (40 + rank + step % 3) * GIB,
                         "cuda_peak_reserved_bytes": (50 + rank) * GIB,
                         "rss_peak_bytes": (8 + step // 10) * GIB})
    return rows


def _collectives(run: str) -> list[dict[str, Any]]:
    """Two all-reduce groups per step; the straggler's own time is the transfer alone (it
    arrives last and waits for nobody), the others' is their wait for it plus the transfer."""
    rows = []
    for step in range(STEPS):
        for size, transfer in ((4 << 20, 1_000.0), (1 << 20, 300.0)):
            for rank in range(RANKS):
                wait = 0.0 if rank == STRAGGLER else 5_000.0 + 100.0 * ((step + rank) % 4)
                rows.append({**_identity(run, rank),
                             "ts": T0 + timedelta(seconds=step * STEP_S, microseconds=rank),
                             "source": "gloo_timer", "comm_id": f"{run}/dp",
                             "comm_name": "DDP gradients", "n_ranks": RANKS, "nnodes": 2,
                             "coll": "AllReduce", "coll_sn": step, "msg_size_bytes": size,
                             "exec_time_us": transfer + wait, "timing_source": "collective_cpu",
                             "algo": "", "hostname": "h", "pid": 1})
    return rows


def _fleet(run: str) -> list[dict[str, Any]]:
    rows = []
    for i in range(STEPS * STEP_S // 10):
        for service, base in (("tokenizer", 2.0), ("reward", 8.0)):
            degraded = service == "reward" and i >= 15
            rows.append({**_identity(run, 0), "ts": T0 + timedelta(seconds=10 * i), "step": i,
                         "service": service, "throughput_rps": 100.0 + i,
                         "queue_wait_ms_p50": base + i * 0.1, "queue_wait_ms_p99": base * 3,
                         "process_ms_p50": base * 2, "process_ms_p99": base * 5,
                         "transfer_ms_p50": base / 2,
                         "transfer_ms_p99": None if i == 3 else base,  # a window without samples
                         "pending": i % 5, "workers_healthy": 3 if degraded else 4,
                         "workers_known": 4, "restarts": int(degraded and i == 15),
                         "errors": 2 if degraded else 0})
    return rows


def _event(run: str, reason: str, at: datetime, message: str, source: str = "driver",
           severity: str = "Normal") -> dict[str, Any]:
    return {**_identity(run, -1, "head"), "ts": at, "source": source, "object_kind": "Run",
            "object_name": run, "reason": reason, "severity": severity, "message": message,
            "count": 1}


def fill_cluster(api: KubeApiServer) -> None:
    """Two nodes, the straggler's pod running on one (a GKR pod: managed-by gkr), and a pod
    that is not GKR's. Label keys spelled here, independently of runtime/identity.py."""
    for name, ready in (("node-0", "True"), ("node-1", "False")):
        api.put({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"node.kubernetes.io/instance-type": "a3-highgpu-8g"},
            "annotations": {"warden.gkr.dev/state": "cordoned"} if ready == "False" else {}},
            "spec": {"unschedulable": ready == "False"},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}})
    labels = {"app.kubernetes.io/managed-by": "gkr", "gkr.dev/job": "tiny",
              "gkr.dev/role": "worker"}
    for name, owned in ((f"{RUN}-worker-{STRAGGLER}", True), ("someone-else", False)):
        api.put({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": "team-llm", "labels": labels if owned else {}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "main", "image": "i"}]},
            "status": {"phase": "Running", "startTime": _rfc3339(T0),
                       "containerStatuses": [{"name": "main", "restartCount": 1}]}})


def fill_store(dsn: str) -> None:
    """The synthetic run, in a child process: this one may hold another chDB folder already
    (chDB serves one folder a process; an in-process Warden worker's event log keeps the
    session's store open)."""
    code = f"from tests.telemetry.test_ui import write_store\nwrite_store({dsn!r})"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=300,
                   env={**os.environ, _T0_ENV: T0.isoformat()})


def write_store(dsn: str) -> None:
    """The synthetic run (4 ranks, rank 2 the straggler, two aux services, started and
    succeeded), a failed run whose name and message are HTML, and a Warden event."""
    end = T0 + timedelta(seconds=STEPS * STEP_S)
    with Store.connect(dsn) as store:
        store.insert("train_steps", _steps(RUN, STEPS) + _steps(EVIL, 3))
        store.insert("collectives", _collectives(RUN))
        store.insert("fleet_summaries", _fleet(RUN))
        store.insert_raw("sample_ledger_raw", "JSONEachRow", _ledger(RUN))
        store.insert("events", [
            _event(RUN, "Started", T0, f"run {RUN} started"),
            _event(RUN, "Succeeded", end, f"run {RUN} finished"),
            _event(EVIL, "Started", end, "started"),
            _event(EVIL, "Failed", end + timedelta(seconds=5), EVIL_MESSAGE,
                   severity="Warning"),
            {**_event("", "Cordoned", end, "node-1: XID 79 " + EVIL_MESSAGE, source="warden"),
             "object_kind": "Node", "object_name": "node-1", "node": "node-1"},
        ])


SAMPLES = 32  # a rank's samples a step (TOKENS / 128)


def _ledger(run: str) -> bytes:
    """The run's sample ledger: every rank trained its slot of each step's global batch."""
    started = int(T0.timestamp() * 1e9)
    lines = [{"run_id": run, "started": started, "origin": "fresh", "resumed_from": 0,
              "step": step + 1, "group": -1, "rank": rank, "pid": 100 + rank,
              "at": T0.timestamp() + (step + 1) * STEP_S, "slot": rank, "slots": RANKS,
              "epoch_size": 10**6, "starts": [step * RANKS * SAMPLES + rank * SAMPLES],
              "count": SAMPLES, "batch_starts": [step * RANKS * SAMPLES],
              "batch_count": RANKS * SAMPLES}
             for step in range(STEPS) for rank in range(RANKS)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@dataclass
class UiProcess:
    """`gkr ui` as a child process on a free port: its URL, and its output so far."""

    process: subprocess.Popen[str]
    url: str
    output: list[str]
    reader: threading.Thread

    @classmethod
    def start(cls, dsn: str, *extra: str, env: dict[str, str] | None = None) -> UiProcess:
        command = [GKR, "ui", "--port", "0", "--dsn", dsn,
                   "--temporal-address", "127.0.0.1:1", *extra]
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env or _env())
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.extend(process.stdout or []),
                                  daemon=True)
        reader.start()
        server = cls(process, "", output, reader)
        try:  # the first line says where it listens
            first = wait_until(lambda: output[:1], 120, "gkr ui to say where it listens")[0]
        except WaitTimeout:
            server.fail("gkr ui did not start")
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", first)
        if found is None:
            server.fail("gkr ui did not start")
        server.url = found.group(1)
        return server

    def fail(self, why: str) -> NoReturn:
        """Fail the test with the server's output and, when it is stuck, every thread's
        stack (faulthandler, on in `_env`, prints them on SIGABRT)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGABRT)
        self.process.wait(timeout=60)
        self.reader.join(timeout=60)  # the last lines, up to the closed pipe
        pytest.fail(f"{why}:\n{''.join(self.output)}")

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body of a GET (an HTTP error status is an answer too)."""
        try:
            with urllib.request.urlopen(self.url.rstrip("/") + path, timeout=120) as answer:
                return answer.status, dict(answer.headers), answer.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()
        except TimeoutError:
            self.fail(f"no answer to GET {path} within 120 s")

    def json(self, path: str, status: int = 200) -> Any:
        code, _, body = self.get(path)
        assert code == status, body
        return json.loads(body)

    def stop(self) -> int:
        """Ctrl-C, as a user stops it; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=60)


def _rfc3339(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _env() -> dict[str, str]:
    # No cluster: an empty kubeconfig path list falls back to ~/.kube/config, so point at none.
    return {**os.environ, "KUBECONFIG": "/nonexistent/kubeconfig", "NO_COLOR": "1",
            "PYTHONFAULTHANDLER": "1"}


@pytest.fixture(scope="module")
def store_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    dsn = f"chdb://{tmp_path_factory.mktemp('ui') / 'telemetry'}"
    fill_store(dsn)
    return dsn


@pytest.fixture(scope="module")
def ui(store_dsn: str) -> Iterator[UiProcess]:
    server = UiProcess.start(store_dsn)
    yield server
    server.stop()


def test_runs_lists_both_runs_with_steps_ranks_and_state(ui) -> None:
    body = ui.json("/api/runs")
    runs = {run["run"]: run for run in body["runs"]}
    assert set(runs) == {RUN, EVIL}
    run = runs[RUN]
    assert (run["last_step"], run["ranks"], run["state"]) == (STEPS - 1, RANKS, "Succeeded")
    assert run["first_ts"] == _rfc3339(T0)
    assert run["last_ts"] == _rfc3339(T0 + timedelta(minutes=3))  # the Succeeded event
    assert runs[EVIL]["state"] == "Failed"
    assert body["store"].startswith("chdb://")


def test_run_page_has_curves_fleet_placement_and_events(ui) -> None:
    page = ui.json(f"/api/runs/{urllib.parse.quote(RUN, safe='')}")
    steps = page["steps"]
    assert [row["step_from"] for row in steps] == list(range(STEPS))
    first = steps[0]
    assert first["ranks"] == RANKS
    assert first["loss_mean"] == pytest.approx(2.6 + 0.02 * 1.5)  # mean of 2.6 + 0.02 * rank
    assert (first["loss_min"], first["loss_max"]) == pytest.approx((2.6, 2.66))
    assert first["run_samples_per_s"] == pytest.approx(3 * 32 / 0.5 + 32 / 0.55)  # all ranks
    assert set(page["fleet"]) == {"tokenizer", "reward"}
    assert len(page["fleet"]["reward"]) == 18  # one point per 10 s summary (bucket 1 s)
    assert page["fleet"]["reward"][3]["transfer_ms_p99"] is None
    health = {row["service"]: row for row in page["health"]}
    assert (health["reward"]["workers_healthy"], health["reward"]["errors"]) == (3, 6)
    workers = [p for p in page["placement"] if p["role"] == "worker"]
    assert [(p["rank"], p["pod"], p["node"]) for p in workers] == [
        (r, f"{RUN}-worker-{r}", f"node-{r // 2}") for r in range(RANKS)]
    assert [e["reason"] for e in page["events"]] == ["Succeeded", "Started"]


def test_run_page_has_the_sample_ledgers_verdict(ui) -> None:
    ledger = ui.json(f"/api/runs/{urllib.parse.quote(RUN, safe='')}")["ledger"]
    assert ledger["available"] and ledger["exactly_once"]
    assert ledger["headline"] == (f"exactly once: {STEPS * RANKS * SAMPLES} samples "
                                  f"[0, {STEPS * RANKS * SAMPLES}) up to step {STEPS}")
    none = ui.json(f"/api/runs/{urllib.parse.quote(EVIL, safe='')}")["ledger"]
    assert none["available"] is False and "no sample ledger" in none["message"]


def test_run_page_has_each_ranks_throughput_mfu_memory_and_step_time(ui) -> None:
    ranks = ui.json(f"/api/runs/{urllib.parse.quote(RUN, safe='')}")["ranks"]
    table = {row["rank"]: row for row in ranks["table"]}
    assert sorted(table) == list(range(RANKS)) and ranks["ranks_total"] == RANKS
    for rank, row in table.items():
        times = [0.5 + (0.05 if rank == STRAGGLER else 0.0) + 0.01 * math.sin(step / 8)
                 for step in range(STEPS)]
        assert row["steps"] == STEPS and row["last_step"] == STEPS - 1
        assert row["tokens_per_s_mean"] == pytest.approx(sum(TOKENS / t for t in times) / STEPS)
        assert row["mfu_mean"] == pytest.approx(
            row["tokens_per_s_mean"] * FLOPS_PER_TOKEN / PEAK_FLOPS)
        assert row["step_time_mean_s"] == pytest.approx(sum(times) / STEPS)
        assert row["step_time_max_s"] == pytest.approx(max(times))
        assert row["cuda_peak_allocated_bytes"] == (42 + rank) * GIB
        assert row["cuda_peak_reserved_bytes"] == (50 + rank) * GIB
        assert row["rss_peak_bytes"] == 13 * GIB
    assert min(table.values(), key=lambda r: r["tokens_per_s_mean"])["rank"] == STRAGGLER
    # Four ranks: all drawn, one point a step each.
    assert [curve["rank"] for curve in ranks["curves"]] == list(range(RANKS))
    for curve in ranks["curves"]:
        assert [p["step_from"] for p in curve["steps"]] == list(range(STEPS))
    point = ranks["curves"][STRAGGLER]["steps"][5]
    assert point["tokens_per_s_mean"] == pytest.approx(TOKENS / (0.55 + 0.01 * math.sin(5 / 8)))
    assert point["cuda_peak_allocated_bytes"] == (40 + STRAGGLER + 2) * GIB


def test_the_slowest_ranks_are_the_ones_drawn() -> None:
    table = [{"rank": r, "tokens_per_s_mean": 1000.0 - (r % 7) * 10} for r in range(40)]
    shown = data.chart_ranks(table)
    assert len(shown) == data.CHART_RANKS and shown == sorted(shown)
    # The five ranks at 940 tokens/s, then the lowest three of those at 950, in rank order.
    assert shown == [5, 6, 12, 13, 19, 20, 27, 34]


def test_stragglers_fold_the_analysis_into_rank_by_window_cells(ui) -> None:
    body = ui.json(f"/api/runs/{RUN}/stragglers?window=30")
    assert body["available"] and body["window_s"] == 30
    heat = body["heatmap"]
    assert heat["ranks"] == list(range(RANKS))
    assert len(heat["windows"]) == 6 == heat["windows_total"]
    assert heat["windows"][0] == _rfc3339(T0)
    late = heat["late_us"]
    for window in range(6):
        column = [late[rank][window] for rank in range(RANKS)]
        # The straggler came about 5 ms after the others, who came within 0.3 ms of each other.
        assert column[STRAGGLER] > 4_000
        assert max(column[:STRAGGLER] + column[STRAGGLER + 1:]) < 1_000
        assert heat["last"][STRAGGLER][window] == heat["groups"][STRAGGLER][window] == 2
    top = body["ranks"][0]
    assert (top["rank"], top["persistent"], top["share_last"]) == (STRAGGLER, True, 1.0)
    assert top["pod"] == f"{RUN}-worker-{STRAGGLER}" and top["node"] == "node-1"
    assert [r["persistent"] for r in body["ranks"][1:]] == [False] * (RANKS - 1)
    wider = ui.json(f"/api/runs/{RUN}/stragglers?window=60")["heatmap"]
    assert len(wider["windows"]) == 3


def test_a_run_without_collectives_says_so_and_an_unknown_run_is_404(ui) -> None:
    body = ui.json(f"/api/runs/{urllib.parse.quote(EVIL, safe='')}/stragglers")
    assert body["available"] is False and "no collective samples" in body["message"]
    missing = ui.json("/api/runs/nope", status=404)
    assert "run 'nope' has no telemetry" in missing["error"]
    assert "window=" in ui.json(f"/api/runs/{RUN}/stragglers?window=0", status=400)["error"]
    assert "window=" in ui.json(f"/api/runs/{RUN}/stragglers?window=x", status=400)["error"]


def test_run_names_with_slashes_and_markup_round_trip(ui) -> None:
    page = ui.json(f"/api/runs/{urllib.parse.quote(EVIL, safe='')}")
    assert page["summary"]["run"] == EVIL
    assert page["events"][0]["message"] == EVIL_MESSAGE  # data as written: the page escapes


def test_answers_are_json_or_the_page_own_files_with_a_strict_policy(ui) -> None:
    status, headers, body = ui.get("/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy
    # The page is static: no stored text is ever written into HTML by the server.
    assert b"<script src=\"/static/app.js\" defer></script>" in body and b"http" not in body
    for path in ("/api/runs", "/api/events", f"/api/runs/{RUN}"):
        status, headers, _ = ui.get(path)
        assert headers["Content-Type"] == "application/json"
        assert headers["X-Content-Type-Options"] == "nosniff"
    for path in ("/static/../server.py", "/static/%2e%2e%2fserver.py", "/static/app.py",
                 "/static/nope.js", "/etc/passwd"):
        assert ui.get(path)[0] == 404, path


def test_no_cluster_and_no_warden_are_answers_not_errors(ui) -> None:
    cluster = ui.json("/api/cluster")
    assert cluster["reachable"] is False and "/nonexistent/kubeconfig" in cluster["reason"]
    warden = ui.json("/api/warden")
    assert warden["reachable"] is False and "127.0.0.1:1" in warden["reason"]


@UNANSWERED_IN_FULL_SUITE
def test_a_reachable_cluster_gives_its_nodes_and_gkr_pods(store_dsn, tmp_path) -> None:
    with KubeApiServer() as api:
        fill_cluster(api)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig", "double")
        server = UiProcess.start(store_dsn, "--kubeconfig", str(kubeconfig))
        try:
            body = server.json("/api/cluster")
        finally:
            server.stop()
    assert (body["reachable"], body["context"], body["host"]) == (True, "double", api.url)
    assert [(n["name"], n["ready"], n["cordoned"], n["warden_state"], n["instance_type"])
            for n in body["nodes"]] == [("node-0", True, False, None, "a3-highgpu-8g"),
                                        ("node-1", False, True, "cordoned", "a3-highgpu-8g")]
    assert body["pods"] == [{"namespace": "team-llm", "name": f"{RUN}-worker-{STRAGGLER}",
                             "job": "tiny", "role": "worker", "phase": "Running",
                             "node": "node-1", "started": _rfc3339(T0), "restarts": 1}]


@UNANSWERED_IN_FULL_SUITE
@pytest.mark.slow
def test_warden_nodes_come_from_temporal_and_node_annotations(request, store_dsn,
                                                              tmp_path) -> None:
    """A real Temporal dev server and Warden worker (tests/warden's fixtures, asked for by
    name) handle an incident on a node of the Kubernetes API double; gkr ui lists the node
    with its phase and Warden's cordon memory, as `gkr warden status` does."""
    runner, dev, fakes = map(request.getfixturevalue, ("loop", "temporal", "doubles"))
    fakes[0].put(gpu_node("gpu-ui"))
    config = fast_config(dev, fakes, tmp_path)
    worker = RunningWorker(runner, dev, config, sweeps=False)
    try:
        runner.run(trigger_node(dev.client, config, "gpu-ui", Trigger("fault", "Xid 79")))
        assert result(runner, dev, "gpu-ui").phase == "healthy"
    finally:
        worker.stop()
    server = UiProcess.start(store_dsn, "--kubeconfig", str(config.kubernetes.kubeconfig),
                             "--temporal-address", config.temporal.address)
    try:
        body = server.json("/api/warden")
    finally:
        server.stop()
    assert body["reachable"] is True and body["address"] == config.temporal.address
    row = next(r for r in body["nodes"] if r["node"] == "gpu-ui")
    assert (row["phase"], row["status"], row["working"]) == ("healthy", "COMPLETED", False)
    assert row["recent_cordons"] == "1" and row["cordoned"] is False


def test_a_foreign_host_header_is_refused(ui) -> None:
    request = urllib.request.Request(ui.url + "api/runs", headers={"Host": "evil.example:80"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    assert refused.value.code == 421


def test_a_store_held_by_a_run_answers_503_then_serves_once_released(ui, store_dsn) -> None:
    """The store is opened per request: while another process holds the chDB folder (as a
    run's store actor does) the API says so with a Retry-After; once released, it serves."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom runtime.telemetry.store import Store\n"
         f"s = Store.connect({store_dsn!r}, migrate=False)\nprint('held', flush=True)\n"
         "sys.stdin.readline()\ns.close()"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        status, headers, body = ui.get("/api/runs")
        assert status == 503 and headers["Retry-After"] == "5"
        answer = json.loads(body)
        assert answer["busy"] is True and "open in another process" in answer["error"]
    finally:
        holder.communicate("\n", timeout=60)
    # The holder could take the folder although the UI had served before: it lets go of it
    # between requests. And asked again, it serves.
    assert {run["run"] for run in ui.json("/api/runs")["runs"]} == {RUN, EVIL}


@UNANSWERED_IN_FULL_SUITE
def test_ctrl_c_stops_it_with_exit_130(store_dsn) -> None:
    server = UiProcess.start(store_dsn)
    assert server.json("/api/runs")["runs"]
    assert server.stop() == 130
    assert "gkr ui: stopped" in "".join(server.output)


@UNANSWERED_IN_FULL_SUITE
def test_a_taken_port_is_a_clear_error(ui, store_dsn) -> None:
    port = ui.url.rsplit(":", 1)[1].strip("/")
    done = subprocess.run([GKR, "ui", "--port", port, "--dsn", store_dsn], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr
