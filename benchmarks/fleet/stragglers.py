"""Straggler analysis on the simulated fleet: an hour of every rank's telemetry, ingested as
the ranks write it, then `gkr stragglers` as a user runs it.

For fleet.gpus ranks (one pod of 8 ranks per node, nodes spread over the fleet's clusters),
one hour of 30 s windows with a training step every 10 s:

* collectives: three collective groups over all ranks, one collective of each per step, in
  testing/synthetic.py's arrival model (a late rank has the shortest time). They are
  written as NCCL Inspector records (NDJSON) and posted into `nccl_records` as Fluent Bit
  posts them (generator/telemetry.py; the JSON reader types them, the view of schema/0009 maps
  them, 0003, 0004 and 0010 roll them up on insert), in bodies of BODY_BYTES;
* training steps: one `train_steps` row per rank and step, in the rows and batches a rank's
  TelemetryWriter hands to the store.

Injected: one rank late all hour (the persistent straggler), a node whose 8 ranks are later
still for a sixth of the hour, and another rank later still for another sixth. The analysis
must find exactly them: in every window, the last arriver is a rank of the worst incident of
that window, and the persistent straggler is the only rank last in most of its groups.

Figures: ingest time and rows/s per path; `gkr stragglers` through the CLI (a fresh process,
output piped; goal < 2 s) and its CPU seconds; the analysis alone in this process (the
difference is the CLI's start-up: Python, chDB, opening the store); pandas over the same
samples, what a user would otherwise write; their ratio. The machine is shared: figures are
the best of `repeat`, and CPU seconds are less sensitive to the neighbours than wall time.

    .venv/bin/python -m benchmarks.fleet.stragglers --nodes 125 [--windows 120] [--repeat 3]
"""

from __future__ import annotations

import argparse
import inspect
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from benchmarks.fleet import Figure, Fleet
from benchmarks.telemetry import timed as best  # the best of N calls, and the last result
from generator.telemetry import RECORDS_INSERT_SETTINGS, RECORDS_TABLE
from runtime.identity import Identity
from runtime.telemetry import stragglers
from runtime.telemetry.store import Store
from runtime.telemetry.writer import TelemetryWriter
from testing.synthetic import Run, Straggler, samples

PIECE = "stragglers"
GOAL_S = 2.0  # issue 15: `gkr stragglers` over 10,000 ranks' hour
RUN = "fleet-hour"
STEP_S = 10
CHUNK_WINDOWS = 4  # windows generated at a time: bounded memory at 10,000 ranks
BODY_BYTES = 16 << 20  # one INSERT body
# The rows a rank's writer hands to the store at once (its default batch).
WRITER_BATCH: int = inspect.signature(TelemetryWriter).parameters["batch_rows"].default
GKR = str(Path(sys.executable).with_name("gkr"))


@dataclass(frozen=True)
class Incident:
    """Ranks that arrive `delay_us` late in the windows listed."""

    what: str
    ranks: tuple[int, ...]
    delay_us: float
    windows: range


@dataclass(frozen=True)
class Hour:
    """What to generate: the fleet's ranks over `windows` windows, with `incidents`."""

    fleet: Fleet
    windows: int = 120
    window_s: int = 30
    run: str = RUN
    seed: int = 0
    incidents: tuple[Incident, ...] = ()

    @classmethod
    def of(cls, fleet: Fleet, windows: int = 120) -> Hour:
        """An hour (or `windows` windows) of the fleet with the three injected incidents."""
        if fleet.nodes < 3:
            raise ValueError("the incidents need a fleet of 3 nodes or more")
        ranks, per_node = fleet.gpus, fleet.gpus_per_node
        node = fleet.nodes * 2 // 3
        return cls(fleet, windows, incidents=(
            Incident("persistent rank", (ranks // 3 + 1,), 15_000.0, range(windows)),
            Incident("slow node", tuple(range(node * per_node, (node + 1) * per_node)),
                     40_000.0, range(windows // 3, windows // 2)),
            Incident("slow rank", (ranks - 3,), 25_000.0,
                     range(2 * windows // 3, 5 * windows // 6)),
        ))

    @property
    def ranks(self) -> int:
        return self.fleet.gpus

    @property
    def steps(self) -> int:
        return self.windows * self.window_s // STEP_S

    def start(self) -> datetime:
        """The first window: a whole hour, so that every window size up to an hour aligns."""
        return Run().t0() - timedelta(seconds=self.windows * self.window_s - 3600)

    def worst(self, window: int) -> Incident | None:
        """The incident whose ranks arrive last in `window`: the latest one then."""
        active = [i for i in self.incidents if window in i.windows]
        return max(active, key=lambda i: i.delay_us, default=None)


# --- the ranks' rows ----------------------------------------------------------------------

class Placement:
    """Where each rank runs: its node (round-robin over the clusters), pod and identity."""

    def __init__(self, hour: Hour) -> None:
        fleet = hour.fleet
        self.node_names = fleet.node_names()
        self.clusters = [fleet.clusters[i % len(fleet.clusters)] for i in range(fleet.nodes)]
        self.pods = [f"{hour.run}-worker-{i}" for i in range(fleet.nodes)]
        self.per_node = fleet.gpus_per_node
        self.run = hour.run

    def identity(self, rank: int) -> Identity:
        node = rank // self.per_node
        return Identity(cluster=self.clusters[node], namespace="team-llm", team="llm",
                        job=self.run, kind="rayjob", run=self.run, rank=rank, role="worker",
                        pod=self.pods[node], node=self.node_names[node])

    def column(self, names: list[str], ranks: np.ndarray) -> pa.Array:
        """Each rank's entry of a per-node list, as strings."""
        codes = pa.array((ranks // self.per_node).astype(np.int32))
        return pc.cast(pa.DictionaryArray.from_arrays(codes, pa.array(names)), pa.string())


def collective_chunks(hour: Hour) -> Iterator[pa.Table]:
    """The hour's collective samples, CHUNK_WINDOWS windows at a time (synthetic's model)."""
    for first in range(0, hour.windows, CHUNK_WINDOWS):
        count = min(CHUNK_WINDOWS, hour.windows - first)
        late = tuple(
            Straggler(rank, incident.delay_us, tuple(w - first for w in incident.windows
                                                     if first <= w < first + count))
            for incident in hour.incidents for rank in incident.ranks
            if any(first <= w < first + count for w in incident.windows))
        yield samples(Run(run=hour.run, ranks=hour.ranks, windows=count,
                          window_s=hour.window_s, per_window=hour.window_s // STEP_S,
                          stragglers=late, seed=hour.seed * 10_000 + first,
                          start=hour.start() + timedelta(seconds=first * hour.window_s)))


def inspector_lines(table: pa.Table, where: Placement) -> pa.Array:
    """The samples as NCCL Inspector records (reference/telemetry.md §1), one JSON line each,
    with the identity keys Fluent Bit adds (runtime.telemetry.inspector.IDENTITY_KEYS)."""
    ranks = table["rank"].to_numpy()
    pod = where.column(where.pods, ranks)

    def text(name: str) -> pa.Array:
        return pc.cast(table[name].combine_chunks(), pa.string())

    ts = pc.cast(pc.cast(table["ts"].combine_chunks(), pa.int64()), pa.string())
    parts: list[Any] = [
        '{"header":{"id":"', text("comm_id"), '","comm_name":"', text("comm_name"),
        '","rank":', text("rank"), ',"n_ranks":', text("n_ranks"), ',"nnodes":',
        text("nnodes"), '},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"",'
        '"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":', ts,
        ',"hostname":"', pod, '","pid":', text("pid"), '},"coll_perf":{"coll":"',
        text("coll"), '","coll_sn":', text("coll_sn"), ',"coll_msg_size_bytes":',
        text("msg_size_bytes"), ',"coll_exec_time_us":', text("exec_time_us"),
        ',"coll_timing_source":"kernel_gpu","coll_algobw_gbs":', text("algobw_gbs"),
        ',"coll_busbw_gbs":', text("busbw_gbs"), '},"cluster":"',
        where.column(where.clusters, ranks), '","namespace":"team-llm","team":"llm","job":"',
        where.run, '","kind":"rayjob","run":"', where.run, '","pod":"', pod, '","node":"',
        where.column(where.node_names, ranks), '"}\n',
    ]
    return pc.binary_join_element_wise(*parts, "")


def bodies(lines: pa.Array) -> Iterator[bytes]:
    """NDJSON bodies of at most BODY_BYTES: slices of the lines' own buffer (each ends in a
    newline), as Fluent Bit's http output posts them."""
    offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines)
                                                          + 1]
    data = memoryview(lines.buffers()[2])
    start = 0
    while start < len(lines):
        end = int(np.searchsorted(offsets, offsets[start] + BODY_BYTES, "right")) - 1
        end = min(max(end, start + 1), len(lines))
        yield bytes(data[offsets[start]:offsets[end]])
        start = end


def step_batches(hour: Hour, where: Placement) -> Iterator[list[dict[str, Any]]]:
    """Every rank's `train_steps` rows, as its TelemetryWriter hands them to the store: its
    identity, the time, and the step's values; WRITER_BATCH rows at a time. A step takes as
    long as its latest rank: the incidents slow every rank's step."""
    rng = np.random.default_rng(hour.seed)
    identities = [where.identity(rank).row() for rank in range(hour.ranks)]
    batch: list[dict[str, Any]] = []
    for step in range(hour.steps):
        window = step * STEP_S // hour.window_s
        worst = hour.worst(window)
        step_s = STEP_S + (worst.delay_us / 1e6 if worst else 0.0)
        ts = hour.start() + timedelta(seconds=step * STEP_S)
        loss = 4.0 * np.exp(-step / max(hour.steps, 1)) + rng.normal(0, 0.02, hour.ranks)
        for rank in range(hour.ranks):
            batch.append({"ts": ts, **identities[rank], "step": step,
                          "loss": float(loss[rank]), "step_time_s": step_s,
                          "samples_per_s": 32 / step_s, "tokens_per_s": 32 * 4096 / step_s})
            if len(batch) == WRITER_BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


@dataclass(frozen=True)
class Ingested:
    """What the ingest wrote and how long the inserts took (generation not counted)."""

    collectives: int
    collectives_s: float
    steps: int
    steps_s: float


def ingest(store: Store, hour: Hour) -> Ingested:
    """Write the hour through the ranks' paths; time only the inserts."""
    where = Placement(hour)
    rows, seconds = 0, 0.0
    for table in collective_chunks(hour):
        for body in bodies(inspector_lines(table, where)):
            started = time.perf_counter()
            store.insert_raw(RECORDS_TABLE, "JSONEachRow", body, settings=RECORDS_INSERT_SETTINGS)
            seconds += time.perf_counter() - started
        rows += table.num_rows
    step_rows, step_seconds = 0, 0.0
    for batch in step_batches(hour, where):
        started = time.perf_counter()
        store.insert("train_steps", batch)
        step_seconds += time.perf_counter() - started
        step_rows += len(batch)
    return Ingested(rows, seconds, step_rows, step_seconds)


def settle(store: Store, limit_s: float = 120.0) -> None:
    """Wait for the background merges the inserts started, as an hour-old store has had."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and store.query(
            "SELECT count() FROM system.merges WHERE database = currentDatabase()").rows[0][0]:
        time.sleep(0.5)


# --- what the analysis must find ------------------------------------------------------------

def mismatches(hour: Hour, report: stragglers.StragglerReport) -> list[str]:
    """Where the report differs from the injected incidents (none: found exactly)."""
    problems = []
    start = hour.start()
    for window in report.windows:
        index = int((window.window_start - start).total_seconds()) // hour.window_s
        worst = hour.worst(index)
        if worst is None or window.last_rank not in worst.ranks:
            problems.append(f"window {index} {window.coll}: last rank {window.last_rank}, "
                            f"expected one of {worst.ranks if worst else '(none)'}")
    injected = {rank for incident in hour.incidents for rank in incident.ranks}
    named = {r.rank for r in report.ranks if r.times_last}
    if named - injected:
        problems.append(f"ranks named that were not injected: {sorted(named - injected)}")
    for incident in hour.incidents:
        if not named & set(incident.ranks):
            problems.append(f"{incident.what} {incident.ranks} not found")
    persistent = [r.rank for r in report.persistent()]
    expected = [i.ranks[0] for i in hour.incidents if len(i.windows) == hour.windows]
    if persistent != expected:
        problems.append(f"persistent stragglers {persistent}, expected {expected}")
    return problems


def pandas_last_arrivers(store: Store, hour: Hour) -> set[int]:
    """The analysis as a user would write it: fetch the samples, group in pandas; the ranks
    that were the last arriver of some window and group."""
    frame = store.client.query_df(
        "SELECT ts, comm_id, coll, msg_size_bytes, algo, rank, exec_time_us FROM collectives "
        "WHERE run = {run:String}", parameters={"run": hour.run})
    frame["window"] = frame["ts"].dt.floor(f"{hour.window_s}s")
    keys = ["window", "comm_id", "coll", "msg_size_bytes", "algo"]
    mean = frame.groupby([*keys, "rank"], observed=True)["exec_time_us"].mean().reset_index()
    last = mean.loc[mean.groupby(keys, observed=True)["exec_time_us"].idxmin()]
    return {int(rank) for rank in last["rank"].unique()}


# --- the figures ----------------------------------------------------------------------------

def cli(dsn: str, run: str, repeat: int) -> tuple[float, float, str]:
    """`gkr stragglers RUN` as a user runs it: best wall seconds, the CPU seconds of that
    run, and its output."""
    runs = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run([GKR, "stragglers", run, "--dsn", dsn], capture_output=True,
                              text=True, timeout=600, check=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        runs.append((wall, cpu, done.stdout))
    return min(runs)


def measure(fleet: Fleet, windows: int = 120, repeat: int = 3) -> list[Figure]:
    """Ingest the fleet's hour, then time the analysis three ways; raises if any of them
    misses an injected straggler or names another."""
    hour = Hour.of(fleet, windows)
    folder = Path(tempfile.mkdtemp(prefix="gkr-fleet-stragglers-"))
    dsn = f"chdb://{folder / 'store'}"
    try:
        with Store.connect(dsn) as store:
            loaded = ingest(store, hour)
            settle(store)
            alone, report = best(lambda: stragglers.analyze(store, hour.run, hour.window_s,
                                                            waiting=False), repeat)
            problems = mismatches(hour, report)
            pandas_s, found = best(lambda: pandas_last_arrivers(store, hour), 1)
        named = {r.rank for r in report.ranks if r.times_last}
        if found != named:
            problems.append(f"pandas found {sorted(found)}, the analysis {sorted(named)}")
        command, cpu, out = cli(dsn, hour.run, repeat)
        if report.conclusion() not in " ".join(out.split()):  # Rich may wrap it when piped
            problems.append(f"the CLI did not conclude {report.conclusion()!r}")
        if problems:
            raise AssertionError("; ".join(problems))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return [
        Figure(PIECE, "ranks x windows", hour.ranks * hour.windows, "cells"),
        Figure(PIECE, "ingest: collective samples", loaded.collectives, "rows"),
        Figure(PIECE, "ingest: collectives (Inspector NDJSON)", loaded.collectives_s, "s"),
        Figure(PIECE, "ingest: collectives rate", loaded.collectives / loaded.collectives_s,
               "rows/s"),
        Figure(PIECE, "ingest: train_steps (writer batches)", loaded.steps_s, "s"),
        Figure(PIECE, "ingest: train_steps rate", loaded.steps / loaded.steps_s, "rows/s"),
        Figure(PIECE, "gkr stragglers (CLI, fresh process)", command, "s", goal=GOAL_S),
        Figure(PIECE, "gkr stragglers CPU (CLI process)", cpu, "cpu-s"),
        Figure(PIECE, "analysis alone (in process)", alone, "s"),
        Figure(PIECE, "CLI start-up (CLI - analysis)", max(command - alone, 0.0), "s"),
        Figure(PIECE, "pandas over the same samples", pandas_s, "s"),
        Figure(PIECE, "pandas / gkr stragglers", pandas_s / command, "x"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--windows", type=int, default=120, help="30 s windows (120: an hour)")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for figure in measure(Fleet(options.nodes), options.windows, options.repeat):
        print(f"{figure.name:<42} {figure.value:14,.3f} {figure.unit:<7} {figure.verdict()}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
