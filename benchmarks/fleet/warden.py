"""Warden on the simulated fleet: detection to cordon at fleet size, under injected GPU faults.

Each cluster runs as in production (platform/warden): its own Kubernetes API (the test double
of tests/doubles, holding the cluster's GPU nodes and their events), its own Prometheus (the
double of tests/warden, one DCGM series per GPU and metric), Compute Engine, a Job controller
for the check Jobs, and its own Warden (`python -m runtime.warden --config`, `replicas`
processes on the cluster's task queue) on one shared Temporal dev server.

"One workflow per node" is the design's: a node's workflow has a fixed id and exists while the
node has an incident; detection (one sweep per cluster over every watched node) starts it by
signal-with-start, and a later trigger joins it. Healthy nodes have none: a resident workflow
per healthy node would hold nothing that the cluster does not already say, and detection is a
fleet-wide query either way (`max by (Hostname)` over every GPU is one Prometheus query).

Time is compressed: the detection interval is `interval_s` instead of the production 60 s, and
every other duration (sweeps, polls, check runs, the fault rate) is scaled by the same factor;
what Warden spends on a sweep or a cordon is not, so the goal's 2 s of slack is the
production one. Faults arrive as a Poisson process at `faults_per_hour_per_1000_gpus`
(the kinds in turn), on distinct nodes; a correlated burst (`burst_fraction` of the fleet's
nodes, all in one cluster, Xid 79 at once) comes in the middle of the window; healthy nodes
carry noise below every threshold. A definite fault is cordoned at once, a suspect one after
its node check fails (the fault is real); a reset cures the node. A few healthy nodes
(`false_alarm_fraction`) raise a false alarm from the start: the last-Xid gauge at 74, which
stays there after their check passes; Warden checks each once, then holds it off.

Figures: detection to cordon of the steady faults, p50 and p99 (fault visible in the double
-> the PATCH setting spec.unschedulable reaches the API server; goal: detection interval +
2 s), detection to the check Job for suspects, the burst's slowest cordon, its workflow
start rate and its first start to last cordon (Warden's work, whatever the sweep's phase),
the burst cluster's Warden CPU per burst node and the busiest replica's share of the burst's
cordons (how the work splits across replicas), the detection sweep's duration, history
events per node workflow and per sweep workflow run, the Wardens' peak RSS (goal: the
Deployment's memory limit), faults injected and missed, false cordons, the check Jobs per false
alarm (goal: one) and the detection sweeps after its check cleared it, and the sweep's one
list of node events against the per-node lists it replaced (same double, same run).

    .venv/bin/python -m benchmarks.fleet.warden --nodes 1250 [--replicas 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from benchmarks.fleet import Figure, Fleet
from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Env
from runtime.pods import CheckSuite
from runtime.warden import memory
from runtime.warden.cluster import KubeCluster
from runtime.warden.config import KubernetesSettings, StressSuite, WardenConfig
from runtime.warden.model import NODE_WORKFLOW, node_workflow_id
from testing.doubles.kube_apiserver import KubeApiServer
from testing.temporal import temporal_binary
from testing.warden import CHECKS, CheckJobs, FakeGcp, FakePrometheus, Json, gpu_node, is_stress

ROOT = Path(__file__).resolve().parents[2]
PIECE = "warden"
GPUS = 8
XID = "DCGM_FI_DEV_XID_ERRORS"
# Production durations that the simulation compresses (seconds): a preflight `gkr check` and
# a level-3 `dcgmi diag` on one node, roughly.
PREFLIGHT_S, STRESS_S = 120.0, 1800.0
# Healthy noise, below every default threshold: (metric, highest value), and the application
# Xids (13: graphics engine exception, 31: MMU fault, 43: channel stopped) a job can raise.
NOISE = (("DCGM_FI_DEV_GPU_TEMP", 85), ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 60),
         ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 60),
         ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0))
APP_XIDS = (13, 31, 43)
ROUTINE_EVENTS = ("NodeReady", "RegisteredNode")  # what a healthy node's events look like
TICKS = os.sysconf("SC_CLK_TCK")  # /proc/<pid>/stat CPU times are in clock ticks


@dataclass(frozen=True)
class FaultKind:
    """A fault as it shows: a DCGM value on one GPU, a node condition, or a node event."""

    name: str
    severity: Literal["definite", "ambiguous"]
    metric: str = ""
    value: float = 0.0
    condition: tuple[str, str] = ("", "")
    event: str = ""


# Xids and thresholds as Warden's default config classifies them (runtime/warden/config.py).
FAULTS = (
    FaultKind("Xid 79", "definite", XID, 79),
    FaultKind("Xid 48", "definite", XID, 48),
    FaultKind("ECC DBE", "definite", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2),
    FaultKind("row remap failure", "definite", "DCGM_FI_DEV_ROW_REMAP_FAILURE", 1),
    FaultKind("KernelDeadlock", "definite", condition=("KernelDeadlock", "True")),
    FaultKind("ReadonlyFilesystem", "definite", condition=("ReadonlyFilesystem", "True")),
    FaultKind("Xid 74", "ambiguous", XID, 74),
    FaultKind("Ready Unknown", "ambiguous", condition=("Ready", "Unknown")),
    FaultKind("KernelOops", "ambiguous", event="KernelOops"),
)
BURST = FAULTS[0]
# A healthy node's false alarm: its check passes, and the gauge stays at 74 (last Xid seen).
ALARM = FaultKind("Xid 74 (false alarm)", "ambiguous", XID, 74)
HELD_SWEEPS = 3  # detection sweeps each false alarm's hold-off sees before the run ends


@dataclass(frozen=True)
class Options:
    """What one run simulates; durations in simulated (compressed) seconds."""

    interval_s: float = 2.0  # the detection interval (production: 60 s)
    window_s: float = 60.0  # how long faults are injected
    faults_per_hour_per_1000_gpus: float = 5.0  # in production time
    burst_fraction: float = 0.05  # of the fleet's nodes, failing at once in one cluster
    false_alarm_fraction: float = 0.01  # of the fleet's nodes, with an ambiguous false alarm
    replicas: int = 1  # Warden processes per cluster, on its one task queue
    sweep_iterations: int = 100  # sweeps before a sweep workflow continues as new
    seed: int = 15

    @property
    def compression(self) -> float:
        """Production seconds per simulated second."""
        return WardenConfig().detection.interval_s / self.interval_s


@dataclass
class Fault:
    """One injected fault and when it became visible to Warden's sources."""

    cluster: str
    node: str
    kind: FaultKind
    burst: bool = False
    visible_at: float = 0.0


class SimCluster:
    """One cluster's doubles, populated with its healthy GPU nodes."""

    def __init__(self, name: str, nodes: list[str], options: Options, rng: random.Random):
        self.name, self.nodes, self.options = name, nodes, options
        self.kube = KubeApiServer()
        self.prom = FakePrometheus()
        self.gcp = FakeGcp(kube=self.kube, after_reset=self.cure)
        self.jobs = CheckJobs(self.kube, self.plan)
        self.faulty: dict[str, Fault] = {}
        self.baseline: dict[tuple[str, str, int], float] = {}
        for node in nodes:
            self.kube.put(_healthy_node(node))
            for reason in ROUTINE_EVENTS:
                self.kube.put(_event(node, reason))
            for gpu in range(GPUS):
                self._noise(rng, node, gpu)

    def _noise(self, rng: random.Random, node: str, gpu: int) -> None:
        values = [(metric, float(rng.randint(0, top))) for metric, top in NOISE]
        values.append((XID, float(rng.choice(APP_XIDS)) if rng.random() < 0.02 else 0.0))
        for metric, value in values:
            self.baseline[(metric, node, gpu)] = value
            self.prom.set(metric, node, gpu, value)

    def inject(self, fault: Fault) -> None:
        """Make the fault visible, as the exporter, node-problem-detector or kubelet would."""
        kind, node = fault.kind, fault.node
        self.faulty[node] = fault
        if kind.metric:
            self.prom.set(kind.metric, node, 0, kind.value)
        elif kind.event:
            self.kube.put(_event(node, kind.event, "Warning"))
        else:
            self._condition(node, *kind.condition)
        fault.visible_at = time.time()

    def raise_alarm(self, alarm: Fault) -> None:
        """A false alarm: the gauge shows a suspect Xid on a node whose check passes."""
        self.prom.set(alarm.kind.metric, alarm.node, 1, alarm.kind.value)
        alarm.visible_at = time.time()

    def cure(self, node: str) -> None:
        """A reset (or repair) cures the fault: the exporter and the kubelet report healthy."""
        fault = self.faulty.pop(node, None)
        if fault is None:
            return
        if fault.kind.metric:
            self.prom.set(fault.kind.metric, node, 0,
                          self.baseline[(fault.kind.metric, node, 0)])
        elif fault.kind.condition[0]:
            kind = fault.kind.condition[0]
            self._condition(node, kind, "True" if kind == "Ready" else "False")

    def _condition(self, node: str, kind: str, status: str) -> None:
        obj = self.kube.get("", "nodes", "", node)
        assert obj is not None
        rest = [c for c in obj["status"]["conditions"] if c["type"] != kind]
        obj["status"]["conditions"] = [*rest, {"type": kind, "status": status}]
        self.kube.put(obj)

    def plan(self, node: str, argv: list[str]) -> tuple[bool, str, float]:
        """The check Jobs: the preflight finds a faulty node's fault; the stress test passes."""
        scale = self.options.compression
        if is_stress(argv):
            return True, '{"findings": []}', STRESS_S / scale
        fault = self.faulty.get(node)
        found = [f"{fault.kind.name} reproduced"] if fault else []
        return not found, json.dumps({"findings": found}), PREFLIGHT_S / scale

    def config(self, folder: Path, address: str) -> dict[str, Any]:
        """This cluster's Warden config: the doubles' addresses, durations compressed."""
        scale = self.options.compression
        base = WardenConfig()
        kubeconfig = self.kube.write_kubeconfig(folder / f"{self.name}.kubeconfig")
        recovery = base.recovery
        suites: dict[str, CheckSuite | StressSuite] = {"preflight": base.checks.preflight,
                                                       "stress": base.checks.stress}
        return {
            "temporal": {"address": address, "task_queue": f"warden-{self.name}"},
            "kubernetes": {"kubeconfig": str(kubeconfig)},
            "prometheus": {"url": self.prom.url},
            "cloud": {"compute_url": self.gcp.url, "metadata_url": self.gcp.url},
            "detection": {"interval_s": self.options.interval_s,
                          "events_window_s": base.detection.events_window_s / scale,
                          "cleared_holdoff_s": base.detection.cleared_holdoff_s / scale},
            "recovery": {key: getattr(recovery, key) / scale for key in (
                "sweep_interval_s", "drain_grace_s", "drain_timeout_s", "reboot_timeout_s",
                "repair_timeout_s", "poll_s")},
            "reservations": {"interval_s": base.reservations.interval_s / scale},
            "checks": {**CHECKS, **{name: {**suite.model_dump(), "timeout_s": suite.timeout_s
                                           / scale} for name, suite in suites.items()}},
            "sweep_iterations": self.options.sweep_iterations,
        }

    def close(self) -> None:
        for server in (self.prom, self.gcp):
            server.close()
        self.kube.close()


def _event(node: str, reason: str, kind: str = "Normal") -> Json:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{node}.{reason.lower()}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
            "reason": reason, "message": reason, "type": kind, "count": 1,
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": now, "lastTimestamp": now}


def _healthy_node(name: str) -> Json:
    """A ready GPU node with node-problem-detector's conditions, all clear."""
    node = gpu_node(name, GPUS)
    node["status"]["conditions"] += [{"type": kind, "status": "False"}
                                     for kind in ("KernelDeadlock", "ReadonlyFilesystem")]
    return node


class Wardens:
    """The Warden processes, as the Deployment runs them: `replicas` per cluster."""

    def __init__(self, folder: Path, configs: dict[str, dict[str, Any]], replicas: int):
        env = {key: value for key, value in os.environ.items() if key != Env.TELEMETRY_DSN}
        env["PYTHONPATH"] = str(ROOT)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.clusters: list[str] = []  # of each process
        for cluster, config in configs.items():
            path = folder / f"{cluster}.yaml"
            path.write_text(yaml.safe_dump(config))
            for replica in range(replicas):
                log = folder / f"{cluster}-{replica}.log"
                with log.open("wb") as out:
                    self.processes.append(subprocess.Popen(
                        [sys.executable, "-m", "runtime.warden", "--config", str(path)],
                        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT))
                self.logs.append(log)
                self.clusters.append(cluster)

    def pids(self, cluster: str) -> list[int]:
        return [p.pid for p, c in zip(self.processes, self.clusters, strict=True) if c == cluster]

    def check(self) -> None:
        """Fail with the log's tail when a Warden exited."""
        for process, log in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                tail = log.read_text()[-3000:]
                raise RuntimeError(f"a Warden exited ({process.returncode}):\n{tail}")

    def peak_rss_mib(self) -> float:
        """The largest peak resident set (VmHWM) of the Warden processes."""
        return max(_status_kib(process.pid, "VmHWM") for process in self.processes) / 1024

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # the worker shuts down gracefully
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class CpuClock:
    """Samples the CPU time (user + system) of some processes every 0.1 s, on a thread."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.samples = [(time.time(), self._cpu())]
        self.running = True
        threading.Thread(target=self._sample, daemon=True).start()

    def _cpu(self) -> float:
        total = 0.0
        for pid in self.pids:
            with suppress(OSError):  # an exited process adds nothing more
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
        return total

    def _sample(self) -> None:
        while self.running:
            time.sleep(0.1)
            self.samples.append((time.time(), self._cpu()))

    def between(self, start: float, end: float) -> float:
        """CPU seconds used from the last sample before `start` to the first after `end`."""
        before = max((s for s in self.samples if s[0] <= start), default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= end), default=self.samples[-1])
        return after[1] - before[1]


def _status_kib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return float(line.split()[1])
    return 0.0


def plan_faults(clusters: list[SimCluster], fleet: Fleet, options: Options,
                rng: random.Random) -> tuple[list[tuple[float, Fault]], list[Fault]]:
    """(offset in the window, fault): Poisson arrivals on distinct nodes, and the burst; and
    the false alarms, on other nodes, raised at the start."""
    pool = [(cluster.name, node) for cluster in clusters for node in cluster.nodes]
    rng.shuffle(pool)
    first = clusters[0].name
    size = max(2, round(options.burst_fraction * fleet.nodes))
    burst = [spot for spot in pool if spot[0] == first][:size]
    taken = set(burst)
    rest = [spot for spot in pool if spot not in taken]
    count = max(1, round(options.false_alarm_fraction * fleet.nodes))
    alarms = [Fault(*spot, ALARM) for spot in rest[:count]]
    rest = rest[count:]
    planned = [(options.window_s / 2, Fault(*spot, BURST, burst=True)) for spot in burst]
    per_second = (options.faults_per_hour_per_1000_gpus * fleet.gpus / 1000
                  * options.compression / 3600)
    at, steady = rng.expovariate(per_second), 0
    while at < options.window_s and rest:  # the kinds in turn: every one shows up
        planned.append((at, Fault(*rest.pop(), FAULTS[steady % len(FAULTS)])))
        at, steady = at + rng.expovariate(per_second), steady + 1
    return sorted(planned, key=lambda item: item[0]), alarms


async def inject(planned: list[tuple[float, Fault]], clusters: dict[str, SimCluster],
                 wardens: Wardens) -> None:
    """Make each fault visible at its time."""
    start = time.monotonic()
    for at, fault in planned:
        await asyncio.sleep(max(0.0, start + at - time.monotonic()))
        wardens.check()
        clusters[fault.cluster].inject(fault)


def node_writes(kube: KubeApiServer) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """When each node was cordoned, and when a check Job was created for it (request times)."""
    cordons: dict[str, list[float]] = {}
    checks: dict[str, list[float]] = {}
    for request in list(kube.requests):
        if request.method == "PATCH" and request.path.startswith("/api/v1/nodes/"):
            if (json.loads(request.raw).get("spec") or {}).get("unschedulable") is True:
                cordons.setdefault(request.path.rsplit("/", 1)[1], []).append(request.at)
        elif request.method == "POST" and request.path.endswith("/jobs"):
            pod = json.loads(request.raw)["spec"]["template"]["spec"]
            checks.setdefault(pod["nodeSelector"]["kubernetes.io/hostname"], []).append(
                request.at)
    return cordons, checks


def clear_times(kube: KubeApiServer) -> dict[str, list[float]]:
    """When a node check's clearing was written on each node (its hold-off)."""
    cleared: dict[str, list[float]] = {}
    for request in list(kube.requests):
        if request.method == "PATCH" and request.path.startswith("/api/v1/nodes/"):
            notes = (json.loads(request.raw).get("metadata") or {}).get("annotations") or {}
            if notes.get(memory.CLEARED):
                cleared.setdefault(request.path.rsplit("/", 1)[1], []).append(request.at)
    return cleared


def first_after(times: list[float], start: float) -> float | None:
    return min((t for t in times if t >= start), default=None)


async def settle(faults: list[Fault], alarms: list[Fault], clusters: list[SimCluster],
                 wardens: Wardens, timeout_s: float) -> None:
    """Wait until every fault is cordoned and every false alarm held off for HELD_SWEEPS
    sweeps, or the time is up."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        wardens.check()
        cordons: dict[str, list[float]] = {}
        for cluster in clusters:
            cordons.update(node_writes(cluster.kube)[0])
        held = alarm_states(alarms, clusters).values()
        if all(first_after(cordons.get(f.node, []), f.visible_at) for f in faults) and all(
                sweeps is not None and sweeps >= HELD_SWEEPS for _, sweeps in held):
            return
        await asyncio.sleep(0.5)


async def _ready(clusters: list[SimCluster], wardens: Wardens, timeout_s: float = 120) -> None:
    """Wait until every cluster's Warden has swept once (one query per watched metric)."""
    queries = 1 + len(WardenConfig().detection.metrics)
    deadline = time.monotonic() + timeout_s
    while any(len(cluster.prom.calls) < queries for cluster in clusters):
        wardens.check()
        if time.monotonic() > deadline:
            raise RuntimeError("the Wardens did not start sweeping")
        await asyncio.sleep(0.2)


@dataclass
class Histories:
    """What Temporal holds of the run's workflows."""

    node_lengths: list[int] = field(default_factory=list)  # events, per node workflow run
    held_off: int = 0  # node workflow runs that found their suspect held off
    starts: dict[str, list[float]] = field(default_factory=dict)  # workflow id -> run starts
    cordoned_by: dict[str, list[str]] = field(default_factory=dict)  # id -> cordons' workers
    sweep_lengths: list[int] = field(default_factory=list)  # events, current sweep runs
    sweep_s: list[float] = field(default_factory=list)  # detection sweep activity durations


@dataclass(frozen=True)
class ActivityRun:
    """One activity of a history: its name, the worker that ran it, and for how long."""

    name: str
    worker: str
    seconds: float


async def histories(client: Client, queues: list[str]) -> Histories:
    found = Histories()
    async for execution in client.list_workflows(f'WorkflowType = "{NODE_WORKFLOW}"'):
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id).fetch_history()
        found.node_lengths.append(len(history.events))
        found.held_off += (await execution.memo()).get("phase") == "held-off"
        found.starts.setdefault(execution.id, []).append(execution.start_time.timestamp())
        found.cordoned_by.setdefault(execution.id, []).extend(
            run.worker for run in activity_runs(history.events) if run.name == "warden.cordon")
    for queue in queues:
        for sweep in ("detect", "recover", "reserve"):
            handle = client.get_workflow_handle(f"warden-{sweep}-{queue}")
            found.sweep_lengths.append((await handle.describe()).history_length)
        history = await client.get_workflow_handle(f"warden-detect-{queue}").fetch_history()
        found.sweep_s += [run.seconds for run in activity_runs(history.events)]
    return found


def activity_runs(events: Any) -> list[ActivityRun]:
    """The completed activities of a history (scheduled, started, completed events)."""
    names: dict[int, str] = {}
    started: dict[int, tuple[str, float]] = {}
    runs = []
    for event in events:
        at = event.event_time.ToDatetime(UTC).timestamp()
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = event.activity_task_scheduled_event_attributes \
                .activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            started[attributes.scheduled_event_id] = (attributes.identity, at)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
            worker, start = started[scheduled]
            runs.append(ActivityRun(names[scheduled], worker, at - start))
    return runs


def percentile(values: list[float], share: float) -> float:
    """Nearest rank; NaN when there are none."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * share) - 1)] if ordered else float("nan")


def latencies(faults: list[Fault], clusters: list[SimCluster]) -> dict[str, Any]:
    """Detection to cordon (definite faults: the steady ones, the burst's), to the check Job
    (suspects), faults never cordoned, nodes cordoned without a fault."""
    cordons: dict[str, list[float]] = {}
    checks: dict[str, list[float]] = {}
    for cluster in clusters:
        cordoned, checked = node_writes(cluster.kube)
        cordons.update(cordoned)
        checks.update(checked)
    faulty = {fault.node: fault for fault in faults}
    found: dict[str, Any] = {"definite": [], "burst": [], "suspect": [], "missed": 0,
                             "last_burst_cordon": 0.0}
    for fault in faults:
        cordon = first_after(cordons.get(fault.node, []), fault.visible_at)
        found["missed"] += cordon is None
        if fault.kind.severity == "definite" and cordon is not None:
            found["burst" if fault.burst else "definite"].append(cordon - fault.visible_at)
            if fault.burst:
                found["last_burst_cordon"] = max(found["last_burst_cordon"], cordon)
        check = first_after(checks.get(fault.node, []), fault.visible_at)
        if fault.kind.severity == "ambiguous" and check is not None:
            found["suspect"].append(check - fault.visible_at)
    found["false"] = len([node for node, times in cordons.items()
                          if node not in faulty or min(times) < faulty[node].visible_at])
    return found


def alarm_states(alarms: list[Fault], clusters: list[SimCluster]
                 ) -> dict[str, tuple[int, int | None]]:
    """Per false alarm: its check Jobs, and the detection sweeps since its check cleared it
    (None before)."""
    queries = 1 + len(WardenConfig().detection.metrics)  # per sweep
    states: dict[str, tuple[int, int | None]] = {}
    for cluster in clusters:
        checks, cleared = node_writes(cluster.kube)[1], clear_times(cluster.kube)
        calls = [call.at for call in list(cluster.prom.calls)]
        for alarm in (a for a in alarms if a.cluster == cluster.name):
            since = min(cleared.get(alarm.node, [math.inf]))
            sweeps = len([at for at in calls if at > since]) // queries
            states[alarm.node] = (len(checks.get(alarm.node, [])),
                                  sweeps if since < math.inf else None)
    return states


def alarm_outcome(alarms: list[Fault], clusters: list[SimCluster]) -> tuple[int, int]:
    """The most check Jobs one false alarm got, and the fewest detection sweeps that ran after
    a false alarm's check cleared it (how far its hold-off was put to the test)."""
    states = alarm_states(alarms, clusters).values()
    return (max((checks for checks, _ in states), default=0),
            min((sweeps or 0 for _, sweeps in states), default=0))


def burst_starts(faults: list[Fault], starts: dict[str, list[float]]) -> list[float]:
    """When the burst's node workflows started, in order."""
    return sorted(min(starts[node_workflow_id(f.node)]) for f in faults
                  if f.burst and node_workflow_id(f.node) in starts)


def start_rate(times: list[float]) -> float:
    """Workflows started per second, from the first start to the last."""
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return (len(times) - 1) / span if span > 0 else float("nan")


def memory_limit_mib() -> float:
    """The Warden container's memory limit in platform/warden/deployment.yaml."""
    deployment = yaml.safe_load((ROOT / "platform/warden/deployment.yaml").read_text())
    limit = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    value = str(limit["memory"])
    return float(value.removesuffix("Gi")) * 1024 if value.endswith("Gi") \
        else float(value.removesuffix("Mi"))


def event_listing(cluster: SimCluster, folder: Path) -> tuple[float, float]:
    """Seconds to read every node's events: one list (Warden's sweep), one list per node
    (what the sweep did before); the client connected and warm, the Wardens stopped."""
    kubeconfig = cluster.kube.write_kubeconfig(folder / "ratio.kubeconfig")
    client = KubeCluster.connect(KubernetesSettings(kubeconfig=str(kubeconfig)))
    client.node_events()
    one = min(_timed(client.node_events) for _ in range(3))

    def per_node() -> None:
        for node in cluster.nodes:
            client.kube.events(kind="Node", name=node)

    return one, _timed(per_node)


def _timed(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


@dataclass
class Run:
    """What one simulation observed, before it is turned into figures."""

    faults: list[Fault]
    alarms: list[Fault]
    outcome: dict[str, Any]
    histories: Histories
    rss_mib: float
    burst_cpu_s: float  # CPU of the burst cluster's Wardens, from the burst to its last cordon
    listing: tuple[float, float]


async def simulate(fleet: Fleet, options: Options) -> Run:
    """Build the fleet, run its Wardens, inject the faults, and observe."""
    rng = random.Random(options.seed)
    names = fleet.node_names()
    clusters = [SimCluster(name, [n for n in names if n.startswith(f"{name}-gpu-")], options, rng)
                for name in fleet.clusters]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), ui=False,
        dev_server_log_level="error",
        namespace=WARDEN_TEMPORAL_NAMESPACE)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return await _observe(env.client, clusters, fleet, options, rng, Path(tmp))
    finally:
        await env.shutdown()
        for cluster in clusters:
            cluster.close()


async def _observe(client: Client, clusters: list[SimCluster], fleet: Fleet, options: Options,
                   rng: random.Random, folder: Path) -> Run:
    address = client.service_client.config.target_host
    wardens = Wardens(folder, {c.name: c.config(folder, address) for c in clusters},
                      options.replicas)
    clock = CpuClock(wardens.pids(clusters[0].name))  # the burst's cluster
    try:
        await _ready(clusters, wardens)
        planned, alarms = plan_faults(clusters, fleet, options, rng)
        by_name = {c.name: c for c in clusters}
        for alarm in alarms:
            by_name[alarm.cluster].raise_alarm(alarm)
        await inject(planned, by_name, wardens)
        faults = [fault for _, fault in planned]
        patience = 4 * options.interval_s + PREFLIGHT_S / options.compression + 30
        await settle(faults, alarms, clusters, wardens, patience)
        outcome = latencies(faults, clusters)
        outcome["alarms"] = alarm_outcome(alarms, clusters)
        found = await histories(client, [f"warden-{c.name}" for c in clusters])
        rss = wardens.peak_rss_mib()
    finally:
        clock.running = False
        wardens.stop()
    burst_at = min(f.visible_at for f in faults if f.burst)
    cpu = clock.between(burst_at, outcome["last_burst_cordon"])
    return Run(faults, alarms, outcome, found, rss, cpu, event_listing(clusters[0], folder))


def figures(run: Run, options: Options) -> list[Figure]:
    """The run's figures, each with its goal where it has one."""
    goal = options.interval_s + 2
    outcome, found = run.outcome, run.histories
    one, per_node = run.listing
    burst = len(outcome["burst"])
    starts = burst_starts(run.faults, found.starts)
    workers = Counter(worker for fault in run.faults if fault.burst
                      for worker in found.cordoned_by.get(node_workflow_id(fault.node), []))
    busiest = max(workers.values(), default=0) / max(workers.total(), 1)
    alarm_checks, sweeps_held = outcome["alarms"]
    return [
        Figure(PIECE, "detect-to-cordon p50", percentile(outcome["definite"], 0.5), "s"),
        _seconds("detect-to-cordon p99", outcome["definite"], 0.99, goal),
        _seconds("suspect detect-to-check p99", outcome["suspect"], 0.99, goal),
        Figure(PIECE, "burst size", burst, "nodes"),
        _seconds("burst detect-to-cordon max", outcome["burst"], 1.0, goal),
        Figure(PIECE, "burst start rate", start_rate(starts), "wf/s"),
        Figure(PIECE, "burst first start-last cordon", outcome["last_burst_cordon"] - starts[0]
               if starts else float("nan"), "s"),
        Figure(PIECE, "burst worker CPU per node", 1000 * run.burst_cpu_s / max(burst, 1), "ms"),
        Figure(PIECE, "burst share of busiest worker", busiest, "share"),
        Figure(PIECE, "detection sweep p99", percentile(found.sweep_s, 0.99), "s"),
        Figure(PIECE, "node workflows", len(found.node_lengths), "runs"),
        Figure(PIECE, "node workflows held off", found.held_off, "runs"),
        Figure(PIECE, "node history max", max(found.node_lengths, default=0), "events"),
        Figure(PIECE, "node history median", statistics.median(found.node_lengths or [0]),
               "events"),
        Figure(PIECE, "sweep history max", max(found.sweep_lengths, default=0), "events"),
        Figure(PIECE, "worker peak RSS", run.rss_mib, "MiB", memory_limit_mib()),
        Figure(PIECE, "faults injected", len(run.faults), "faults"),
        Figure(PIECE, "faults missed", outcome["missed"], "faults", 0),
        Figure(PIECE, "false cordons", outcome["false"], "nodes", 0),
        Figure(PIECE, "false alarms", len(run.alarms), "nodes"),
        Figure(PIECE, "checks per false alarm max", alarm_checks, "jobs", 1),
        Figure(PIECE, "sweeps after clearing min", sweeps_held, "sweeps"),
        Figure(PIECE, "node events per-node/one", per_node / one if one else float("nan"), "x"),
    ]


def _seconds(name: str, values: list[float], share: float, goal: float) -> Figure:
    """A latency percentile; a run with no such fault has no value, so no verdict either."""
    return Figure(PIECE, name, percentile(values, share), "s", goal if values else None)


def measure(fleet: Fleet, **options: Any) -> list[Figure]:
    """Simulate Warden on the fleet (`Options` fields as keywords) and return its figures."""
    chosen = Options(**options)
    return figures(asyncio.run(simulate(fleet, chosen)), chosen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1250)
    defaults = Options()
    for name in ("interval_s", "window_s", "faults_per_hour_per_1000_gpus", "burst_fraction",
                 "false_alarm_fraction", "replicas", "sweep_iterations", "seed"):
        default = getattr(defaults, name)
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = vars(parser.parse_args())
    fleet = Fleet(args.pop("nodes"))
    print(f"warden: {fleet.nodes} nodes x {fleet.gpus_per_node} GPUs over "
          f"{len(fleet.clusters)} clusters, {args}")
    for figure in measure(fleet, **args):
        print(f"{figure.name:<28} {figure.value:10.2f} {figure.unit:<7} {figure.verdict()}")


if __name__ == "__main__":
    main()
