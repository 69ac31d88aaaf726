"""The FleetMonitor actor with every rank of the simulated fleet reporting to it.

In a run, each training rank's AuxClient reports its transfer times to the run's FleetMonitor
(runtime/fleet.py, one Ray actor) once per `aux.report_interval_s` (1 s by default), fire and
forget (runtime/train/loop.py), and rank 0 fetches the summaries every few steps. Here the
real actor gets fleet.gpus ranks' reports from a few reporter actors, each reporting for a
slice of the rank ids at a rank's rate and with its payload (`samples` transfer times per
report), while the driver fetches the summaries as rank 0 does. The run lasts past the
monitor's 30 s window, so the window is full and trimmed.

Figures: reports offered and absorbed per second; the rank's cost of one report (submitting
the call); the actor's CPU per report and what the fleet's rate needs of it (one actor is one
Python thread: above one core it falls behind and its queue grows); the actor's resident
memory, and the samples it holds; the summaries call's latency. The machine is shared (and
has two cores): reporters, actor and Ray's own processes compete, so the absorbed rate is what
this machine manages, and the per-report CPU figures are the ones to scale.

    .venv/bin/python -m benchmarks.fleet.monitor --nodes 125 [--seconds 40] [--samples 8]
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from benchmarks.fleet import Figure, Fleet
from runtime.aux.config import AuxConfig
from runtime.fleet import (
    ClientSample,
    FleetState,
    ServiceSummary,
    monitor_name,
    report_interval,
    start_monitor,
)

PIECE = "monitor"
SERVICE = "loader"
REPORTERS = 4  # processes standing in for the ranks
# A rank's report interval as configured by default (aux.report_interval_s).
DEFAULT_INTERVAL_S: float = AuxConfig.model_fields["report_interval_s"].default
SUMMARY_EVERY_S = 5.0  # rank 0's FleetReporter, every few steps
TICK = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parents[2]  # the reporters import this module


def transfer_times(rank: int, samples: int) -> list[float]:
    """A rank's transfer times in one report: known values, so summaries can be checked."""
    return [(1 + (rank + i) % 10) * 1e-4 for i in range(samples)]


@dataclass(frozen=True)
class Sent:
    """What one reporter did: reports sent, seconds spent submitting them, and the seconds
    its reports fell behind their schedule at worst."""

    reports: int
    submit_s: float
    behind_s: float


class Reporter:
    """Reports for a slice of the rank ids, each at one report per interval, spread evenly
    over the interval as independent ranks would be."""

    def __init__(self, run_id: str, first: int, count: int, samples: int) -> None:
        self.monitor = ray.get_actor(monitor_name(run_id))
        self.ranks = range(first, first + count)
        self.payloads = {r: transfer_times(r, samples) for r in self.ranks}

    @ray.method
    def run(self, seconds: float, interval_s: float) -> Sent:
        start = time.monotonic()
        gap = interval_s / max(len(self.ranks), 1)
        sent, rounds, submit, behind = 0, 0, 0.0, 0.0
        while time.monotonic() - start < seconds:
            for index, rank in enumerate(self.ranks):
                late = time.monotonic() - (start + rounds * interval_s + index * gap)
                if late < 0:
                    time.sleep(-late)
                behind = max(behind, late)
                began = time.perf_counter()
                self.monitor.record_client.remote(ClientSample(SERVICE, rank,
                                                               self.payloads[rank]))
                submit += time.perf_counter() - began
                sent += 1
            rounds += 1
        ray.get(self.monitor.__ray_call__.remote(_nothing))  # after all of this caller's calls
        return Sent(sent, submit, behind)


def _nothing(_: Any) -> None:
    """A call that returns once the actor has run everything this caller sent before it."""


def _pid(state: FleetState) -> int:
    return os.getpid()


def _held(state: FleetState) -> int:
    return state.held()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def process_rss_mb(pid: int) -> tuple[float, float]:
    """Resident and peak resident memory of a process, in MiB (/proc/PID/status)."""
    status = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return (int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024)


class Summaries(threading.Thread):
    """Rank 0's FleetReporter: fetch the summaries every SUMMARY_EVERY_S; keeps the slowest
    fetch."""

    def __init__(self, monitor: Any, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.monitor, self.stop = monitor, stop
        self.slowest = 0.0

    def run(self) -> None:
        while not self.stop.wait(SUMMARY_EVERY_S):
            began = time.perf_counter()
            ray.get(self.monitor.summaries.remote(), timeout=300)
            self.slowest = max(self.slowest, time.perf_counter() - began)


def measure(fleet: Fleet, seconds: float = 40.0, samples: int = 8,
            reporters: int = REPORTERS) -> list[Figure]:
    """Every rank of the fleet reporting to one FleetMonitor for `seconds`: at the default
    interval, then at `report_interval`'s for the fleet (the same below 1,000 ranks)."""
    started_ray = not ray.is_initialized()
    if started_ray:  # a cluster of its own, not one another process on the machine runs
        ray.init(address="local", num_cpus=reporters + 1, include_dashboard=False,
                 logging_level=logging.ERROR, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        figures = [Figure(PIECE, "ranks reporting", fleet.gpus, "ranks")]
        sized = report_interval(DEFAULT_INTERVAL_S, fleet.gpus)
        default = _figures(fleet, seconds, samples, reporters, DEFAULT_INTERVAL_S)
        scaled = default if sized == DEFAULT_INTERVAL_S else _figures(
            fleet, seconds, samples, reporters, sized)
        for label, found in ((f"{DEFAULT_INTERVAL_S:g} s", default), ("sized", scaled)):
            figures += [replace(f, name=f"{f.name}, {label}") for f in found]
        return figures
    finally:
        if started_ray:
            ray.shutdown()


def _figures(fleet: Fleet, seconds: float, samples: int, reporters: int,
             interval_s: float) -> list[Figure]:
    """One FleetMonitor, the fleet's ranks reporting every `interval_s` for `seconds`."""
    run_id = f"fleet-{uuid.uuid4().hex[:8]}"
    monitor = start_monitor(run_id, stale_after_s=5.0)
    ranks = fleet.gpus
    share = -(-ranks // reporters)
    remote = ray.remote(num_cpus=1)(Reporter)
    actors: list[Any] = [remote.remote(run_id, first, min(share, ranks - first), samples)
                         for first in range(0, ranks, share)]
    try:
        pid = ray.get(monitor.__ray_call__.remote(_pid))
        ray.get([a.__ray_call__.remote(_nothing) for a in actors])  # constructed
        rss_before, _ = process_rss_mb(pid)
        cpu_before, began = process_cpu_s(pid), time.monotonic()
        stop = threading.Event()
        summaries = Summaries(monitor, stop)
        summaries.start()
        sent: list[Sent] = ray.get([a.run.remote(seconds, interval_s) for a in actors])
        elapsed, cpu = time.monotonic() - began, process_cpu_s(pid) - cpu_before
        stop.set()
        summaries.join()
        _, peak = process_rss_mb(pid)
        held = ray.get(monitor.__ray_call__.remote(_held))
        check(ray.get(monitor.summaries.remote())[SERVICE])
    finally:
        for actor in [*actors, monitor]:
            ray.kill(actor)
    reports = sum(s.reports for s in sent)
    per_report = cpu / reports
    return [
        Figure(PIECE, "reports/s offered", ranks / interval_s, "rep/s"),
        Figure(PIECE, "reports/s absorbed", reports / elapsed, "rep/s"),
        Figure(PIECE, "rank ms per report (submit)",
               sum(s.submit_s for s in sent) / reports * 1e3, "ms"),
        Figure(PIECE, "reporters' worst lag", max(s.behind_s for s in sent), "s"),
        Figure(PIECE, "actor CPU ms per report", per_report * 1e3, "ms"),
        Figure(PIECE, "actor cores the rate needs", per_report * ranks / interval_s, "cores",
               goal=1.0),
        Figure(PIECE, "actor RSS before reports", rss_before, "MiB"),
        Figure(PIECE, "actor RSS peak", peak, "MiB"),
        Figure(PIECE, "latency values held", held, "values"),
        Figure(PIECE, "summaries() slowest", summaries.slowest * 1e3, "ms"),
    ]


def check(summary: ServiceSummary) -> None:
    """The transfer times reported are 0.1-1.0 ms in equal shares (`transfer_times`)."""
    p50, p99 = summary.transfer_ms_p50 or 0.0, summary.transfer_ms_p99 or 0.0
    if not (0.5 - 1e-9 <= p50 <= 0.6 + 1e-9 and abs(p99 - 1.0) < 1e-9):
        raise AssertionError(f"summary transfer p50/p99 {p50}/{p99} ms, expected 0.5-0.6/1.0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--seconds", type=float, default=40.0,
                        help="how long the ranks report (past the 30 s window)")
    parser.add_argument("--samples", type=int, default=8, help="transfer times per report")
    parser.add_argument("--reporters", type=int, default=REPORTERS)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for figure in measure(Fleet(options.nodes), options.seconds, options.samples,
                          options.reporters):
        print(f"{figure.name:<40} {figure.value:14,.3f} {figure.unit:<7} {figure.verdict()}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
