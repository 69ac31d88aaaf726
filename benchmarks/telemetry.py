"""Telemetry: ingest into the embedded store, `gkr stragglers` and gkr-ui's run page at 10 M
collective samples, each figure beside the goal of issue 12 and what a user would otherwise
do, measured in the same run; NCCL Inspector files loaded beside ClickHouse's own reader, and
`gkr stragglers` over a fleet's hour, beside the goals of issue 27.

0. `gkr telemetry ingest inspector` of FILES NCCL Inspector logs of RECORDS records each
   (default 64 x 4,000 = 256,000), as a user runs it (a fresh process; wall and CPU seconds),
   beside ClickHouse's own JSONEachRow reader putting the same files (chDB's `file()`, in a
   fresh Python process, as a user would run it) into the store's typed tables: through
   `nccl_records`, so into `collectives` and the rollups on it, the same rows and tables the
   load fills; and into a plain MergeTree table of the record's typed columns, no rollups.
   Goal: the load within 1.25x of the reader into the same tables. Then the same in this
   process (the load's engine work without Python's and chDB's start-up).

1. Ingest of collective rows into chDB (schema as migrated: the 10-second buckets of
   migration 0003 and the run rollups of 0004 are filled on insert): the project's bulk path
   (`Store.insert_arrow`), the runtime's per-row path (`TelemetryWriter` batching into the
   store), and what a user would write: clickhouse-connect `insert` of Python rows, and NDJSON
   as `JSONEachRow`. Each path starts from the data in the form it takes; the insert alone is
   timed.
2. `gkr stragglers` over RANKS x COLLECTIVES samples (default 10,000 x 1,000 = 10 M, one
   group, windows of 30 s): the command as a user runs it (a fresh process, output piped;
   wall time), the analysis alone in this process, the same SQL on every sample (what it
   read before migration 0003), and pandas over the fetched samples (what a user would write).
3. gkr-ui's run page at that size, plus RANKS x STEPS training-step rows: each query the page
   makes (runtime/telemetry/ui/data.py), timed alone; they read the rollups of migration 0004.

4. `gkr stragglers` over a fleet's job (testing/synthetic.py FleetJob): NODES nodes of 8 ranks
   (default 1,280: 10,240 ranks in 1,288 communicators, a tensor-parallel one per node and a
   data-parallel one per local rank), an hour of 30 s windows, a step every 10 s, as NCCL
   Inspector reports it (ranks within communicators, global ranks announced): the command as
   a user runs it (goal < 1 s), the analysis alone, and the same SQL over every sample (what
   it reads without the group buckets of migration 0010).

The samples are testing/synthetic.py's (with an injected straggler, which every
analysis must find). Sizes are flags; the defaults take a few minutes on two cores.

    .venv/bin/python benchmarks/telemetry.py [--ranks 10000] [--collectives 1000]
        [--steps 1000] [--ingest-rows 2000000] [--inspector-files 64]
        [--inspector-records 4000] [--fleet-nodes 1280] [--fleet-windows 120] [--repeat 3]
        [--only inspector,ingest,stragglers,ui,fleet]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from runtime.identity import Identity
from runtime.telemetry import columns, inspector_load, stragglers
from runtime.telemetry.store import DATABASE, Store, sql_file
from runtime.telemetry.writer import TelemetryWriter
from testing.synthetic import (
    DEFAULT_GROUPS,
    FleetJob,
    Run,
    Straggler,
    fleet_samples,
    per_rank,
    samples,
)

REPO = Path(__file__).resolve().parent.parent

GKR = str(Path(sys.executable).with_name("gkr"))
INGEST_GOAL = 1e6  # rows/s
QUERY_GOAL = 1.0  # s
READER_GOAL = 1.25  # issue 27: the load within 1.25x of the engine's own reader
CHUNK = 1_000_000  # rows per bulk insert


def timed(call: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """The best of `repeat` calls in seconds (as timeit: on a shared machine the others are
    the neighbours' noise), and the last result."""
    seconds, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return min(seconds), result


def verdict(value: float, goal: float, lower_is_better: bool) -> str:
    met = value <= goal if lower_is_better else value >= goal
    return "met" if met else "MISSED"


@contextmanager
def opened(dsn: str) -> Iterator[Store]:
    with Store.connect(dsn) as store:
        yield store


# --- 0. NCCL Inspector files --------------------------------------------------------------

def write_inspector_logs(folder: Path, files: int, records: int) -> int:
    """FILES logs of RECORDS records in the plugin's format (reference/telemetry.md §1): the
    records of one fleet job's ranks, a file per process; the bytes written."""
    job = FleetJob(run="inspector", nodes=max(1, files // 8), windows=max(1, -(-records // 6)))
    folder.mkdir(parents=True)
    table = next(fleet_samples(job, windows_at_once=job.windows)).to_pylist()
    by_process: dict[tuple[str, int], list[str]] = {}
    for row in table:
        by_process.setdefault((row["hostname"], row["pid"]), []).append(_record(row))
    size = 0
    for (host, pid), lines in list(by_process.items())[:files]:
        body = "\n".join(lines[:records]) + "\n"
        (folder / f"{host}-pid{pid}.log").write_text(body)
        size += len(body)
    return size


def _record(row: dict[str, Any]) -> str:
    return json.dumps({
        "header": {"id": row["comm_id"], "comm_name": row["comm_name"], "rank": row["rank"],
                   "n_ranks": row["n_ranks"], "nnodes": row["nnodes"]},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                     "rec_mechanism": "nccl_profiler_interface",
                     "dump_timestamp_us": int(row["ts"].timestamp() * 1e6),
                     "hostname": row["hostname"], "pid": row["pid"]},
        "coll_perf": {"coll": row["coll"], "coll_sn": row["coll_sn"],
                      "coll_msg_size_bytes": row["msg_size_bytes"],
                      "coll_exec_time_us": round(row["exec_time_us"], 3),
                      "coll_timing_source": "kernel_gpu",
                      "coll_algobw_gbs": round(row["algobw_gbs"], 6),
                      "coll_busbw_gbs": round(row["busbw_gbs"], 6)}}, separators=(",", ":"))


# ClickHouse's reader as a user runs it: a fresh Python process, chDB's file() into a table.
READER_SCRIPT = """
import sys
from chdb import session
folder, sql = sys.argv[1:3]
store = session.Session(folder)
store.query(sql)
store.close()
"""


def _typed() -> str:
    """The record's typed structure: `nccl_records`'s tuple columns, as its DDL writes them."""
    table = columns.schema_columns()[inspector_load.TABLE]
    return ", ".join(f"{name} {table[name]}" for name in inspector_load.SECTIONS)


def _reader_sql(logs: Path, into: str, run: str) -> str:
    names = ", ".join(inspector_load.SECTIONS)
    tagged = f"{names}, run" if into == inspector_load.TABLE else names
    value = f", '{run}'" if into == inspector_load.TABLE else ""
    return (f"INSERT INTO {DATABASE}.{into} ({tagged}) SELECT *{value} FROM file("
            f"'{logs}/*.log', 'JSONEachRow', '{_typed()}')")


def _process(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def inspector_figures(folder: Path, files: int, records: int, repeat: int) -> None:
    logs = folder / "logs"
    size = write_inspector_logs(logs, files, records)
    paths = sorted(logs.glob("*.log"))
    store_dir = (folder / "inspector").resolve()
    dsn = f"chdb://{store_dir}"
    with opened(dsn) as store:  # migrated before anything is timed, as a user's store is
        store.command(f"CREATE TABLE plain ({_typed()}) ENGINE = MergeTree ORDER BY tuple()")
        loaded = sum(f.rows for f in inspector_load.load(store, paths, Identity(run="warm")))
    print(f"0. NCCL Inspector logs: {len(paths)} files, {loaded:,} records, {size / 1e6:.0f} MB")
    best: dict[str, tuple[float, float]] = {}
    for i in range(repeat):  # interleaved: the neighbours' load falls on all alike
        for label, argv in (
                ("gkr telemetry ingest inspector (CLI)",
                 [GKR, "telemetry", "ingest", "inspector", str(logs), "--run", f"cli-{i}",
                  "--dsn", dsn, "-o", "json"]),
                ("reader -> the store's tables", [sys.executable, "-c", READER_SCRIPT,
                                                  str(store_dir), _reader_sql(
                                                      logs, inspector_load.TABLE, f"r-{i}")]),
                ("reader -> a plain MergeTree table", [sys.executable, "-c", READER_SCRIPT,
                                                       str(store_dir), _reader_sql(
                                                           logs, "plain", "")])):
            figures = _process(argv)
            best[label] = min(best.get(label, figures), figures)
    _print_processes(best)
    _in_process(dsn, logs, paths, repeat)


def _print_processes(best: dict[str, tuple[float, float]]) -> None:
    for label, (wall, cpu) in best.items():
        print(f"   {label:<40}{wall:6.2f} s   ({cpu:.2f} CPU s)")
    cli = best["gkr telemetry ingest inspector (CLI)"]
    reader = best["reader -> the store's tables"]
    ratio = cli[0] / reader[0]
    print(f"   CLI / reader into the same tables: {ratio:.2f}x wall, {cli[1] / reader[1]:.2f}x "
          f"CPU   goal <= {READER_GOAL}x: {verdict(ratio, READER_GOAL, True)}")


def _in_process(dsn: str, logs: Path, paths: list[Path], repeat: int) -> None:
    """The same two without the processes' start-up: the load's engine work and the reader's."""
    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    best: dict[str, tuple[float, float]] = {}
    with opened(dsn) as store:
        for i in range(repeat):
            for label, call in (
                    ("inspector_load.load", lambda i=i: inspector_load.load(
                        store, paths, Identity(run=f"in-{i}"))),
                    ("reader -> the store's tables", lambda i=i: store.command(
                        _reader_sql(logs, inspector_load.TABLE, f"rin-{i}")))):
                started, used = time.perf_counter(), cpu()
                call()
                figures = (time.perf_counter() - started, cpu() - used)
                best[label] = min(best.get(label, figures), figures)
    for label, (wall, used) in best.items():
        print(f"   in process: {label:<28}{wall:6.2f} s   ({used:.2f} CPU s)")
    load, reader = best["inspector_load.load"], best["reader -> the store's tables"]
    print(f"   in process, load / reader: {load[0] / reader[0]:.2f}x wall, "
          f"{load[1] / reader[1]:.2f}x CPU")


# --- 1. ingest -------------------------------------------------------------------------------

class StoreSink:
    """The writer's sink in one process: the store itself (in a run, an actor holding it)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def insert(self, table: str, rows: list[dict[str, Any]]) -> None:
        self.store.insert(table, rows)


def ingest(dsn: str, rows: int, repeat: int) -> None:
    per_window = max(1, rows // (1000 * 10))
    table = samples(Run(run="ingest", ranks=1000, windows=10, per_window=per_window,
                        groups=DEFAULT_GROUPS[:1]))
    small = table.slice(0, min(200_000, table.num_rows))
    python_rows = [list(row.values()) for row in small.to_pylist()]
    ndjson = _ndjson(small)
    print(f"1. ingest of collective rows into chDB ({table.num_rows:,} rows for the bulk path, "
          f"{small.num_rows:,} for the others)")
    with opened(dsn) as store:
        fast, _ = timed(lambda: _bulk(store, table), repeat)
        naive, _ = timed(lambda: store.client.insert("collectives", python_rows,
                                                     column_names=small.column_names), repeat)
        raw, _ = timed(lambda: store.client.raw_insert("collectives", insert_block=ndjson,
                                                       fmt="JSONEachRow"), repeat)
        per_call, total = _through_writer(store, small)
    rate = table.num_rows / fast
    print(f"   Store.insert_arrow (bulk path)          {rate / 1e6:6.2f} M rows/s   goal >= 1 M "
          f"rows/s: {verdict(rate, INGEST_GOAL, False)}")
    print(f"   TelemetryWriter -> store (per row)      {small.num_rows / total / 1e6:6.2f} M "
          f"rows/s   write() holds the caller {per_call * 1e6:.1f} us a row")
    for label, seconds in (("clickhouse-connect insert, Python rows", naive),
                           ("JSONEachRow (NDJSON prebuilt)", raw)):
        print(f"   {label:<40}{small.num_rows / seconds / 1e6:6.2f} M rows/s")
    print(f"   bulk path / Python rows: {rate / (small.num_rows / naive):.1f}x, / JSONEachRow: "
          f"{rate / (small.num_rows / raw):.1f}x")


def _bulk(store: Store, table: pa.Table) -> None:
    for start in range(0, table.num_rows, CHUNK):
        store.insert_arrow("collectives", table.slice(start, CHUNK))


def _ndjson(table: pa.Table) -> bytes:
    rows = table.to_pylist()
    for row in rows:
        row["ts"] = row["ts"].isoformat()
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


def _through_writer(store: Store, table: pa.Table) -> tuple[float, float]:
    """Seconds per write() on the caller, and seconds until every row is in the store."""
    identity = {"cluster", "namespace", "team", "job", "kind", "run", "learner",
                "replica_group", "rank", "role", "pod", "node", "ts"}
    values = [{k: v for k, v in row.items() if k not in identity} for row in table.to_pylist()]
    writer = TelemetryWriter(StoreSink(store), Identity(run="ingest-writer", rank=0),
                             capacity=len(values) + 1, batch_rows=50_000, interval_s=0.5)
    started = time.perf_counter()
    for row in values:
        writer.write("collectives", row)
    called = time.perf_counter() - started
    writer.close(timeout_s=600)
    assert writer.dropped == 0, f"{writer.dropped} rows dropped"
    return called / len(values), time.perf_counter() - started


# --- 2. gkr stragglers -----------------------------------------------------------------------

def make_run(ranks: int, collectives: int) -> Run:
    windows = 10
    return Run(run="bench", ranks=ranks, windows=windows, per_window=max(1, collectives // windows),
               groups=DEFAULT_GROUPS[:1], stragglers=(Straggler(ranks // 3, 15_000.0),))


def fill(dsn: str, run: Run) -> None:
    started = time.perf_counter()
    table = samples(run)
    made = time.perf_counter() - started
    with opened(dsn) as store:
        seconds, _ = timed(lambda: _bulk(store, table))
    print(f"   {table.num_rows:,} samples made in {made:.1f} s, inserted in {seconds:.1f} s "
          f"({table.num_rows / seconds / 1e6:.2f} M rows/s)")


def straggler_figures(dsn: str, run: Run, repeat: int) -> None:
    injected = run.stragglers[0].rank
    with opened(dsn) as store:
        alone, report = timed(lambda: stragglers.analyze(store, run.run, 30), repeat)
        assert report.ranks[0].rank == injected, report.conclusion()
        raw, _ = timed(lambda: _on_samples(store, run.run))
        pandas, found = timed(lambda: _pandas(store, run.run))
        assert found == injected, f"pandas found rank {found}"
    cli, out = timed(lambda: _cli(dsn, run.run), repeat)
    assert f"rank {injected} " in out.strip().splitlines()[-1], out[-500:]
    print(f"   gkr stragglers (fresh process, piped)   {cli:6.2f} s   goal < 1 s: "
          f"{verdict(cli, QUERY_GOAL, True)}")
    print(f"   analysis alone, 30 s group buckets      {alone:6.2f} s   ({report.source})")
    print(f"   same SQL on every sample (before 0003)  {raw:6.2f} s")
    print(f"   pandas over the fetched samples         {pandas:6.2f} s")
    print(f"   command / pandas: {pandas / cli:.1f}x faster; buckets / samples: "
          f"{raw / alone:.1f}x faster")
    print(f"   {report.conclusion()}")


def _on_samples(store: Store, run: str) -> None:
    parameters = {"run": run, "window_s": 30, "source": stragglers.SAMPLES,
                  "rows": stragglers.SAMPLES, "groups_per_window": stragglers.EVERY_GROUP}
    store.query(sql_file("straggler_windows.sql"), parameters)
    store.query(sql_file("straggler_ranks.sql"), parameters)


def _pandas(store: Store, run: str) -> int:
    """The analysis as a user would write it: fetch the samples, group in pandas."""
    frame = store.client.query_df(
        "SELECT ts, comm_id, coll, msg_size_bytes, rank, exec_time_us FROM collectives "
        "WHERE run = {run:String}", parameters={"run": run})
    frame["window"] = frame["ts"].dt.floor("30s")
    keys = ["window", "comm_id", "coll", "msg_size_bytes"]
    mean = frame.groupby([*keys, "rank"], observed=True)["exec_time_us"].mean().reset_index()
    last = mean.loc[mean.groupby(keys, observed=True)["exec_time_us"].idxmin()]
    return int(last["rank"].value_counts().idxmax())


def _cli(dsn: str, run: str) -> str:
    done = subprocess.run([GKR, "stragglers", run, "--dsn", dsn], capture_output=True,
                          text=True, check=True, timeout=600)
    return done.stdout


# --- 4. gkr stragglers over a fleet's hour ----------------------------------------------------

def fleet_figures(dsn: str, nodes: int, windows: int, repeat: int) -> None:
    job = FleetJob(run="fleet", nodes=nodes, windows=windows,
                   stragglers=(Straggler(nodes * 8 // 3 + 1, 15_000.0),))
    print(f"4. gkr stragglers over a fleet's job: {job.ranks:,} ranks in {job.communicators:,} "
          f"communicators, {windows} windows of {job.window_s} s")
    rows, started = 0, time.perf_counter()
    with opened(dsn) as store:
        for table in fleet_samples(job):
            store.insert_arrow("collectives", table)
            rows += table.num_rows
        store.insert("rank_processes", job.processes())
        print(f"   {rows:,} samples in {time.perf_counter() - started:.1f} s (made and inserted)")
        alone, report = timed(lambda: stragglers.analyze(store, job.run, 30, waiting=False,
                                                         groups_per_window=3), repeat)
        assert [r.rank for r in report.persistent()] == [job.stragglers[0].rank], \
            report.conclusion()
        every, _ = timed(lambda: _on_samples(store, job.run), 1)
    cli, out = timed(lambda: _cli(dsn, job.run), repeat)
    assert report.conclusion() in " ".join(out.split()), out[-500:]
    print(f"   gkr stragglers (fresh process, piped)   {cli:6.2f} s   goal < 1 s: "
          f"{verdict(cli, QUERY_GOAL, True)}")
    print(f"   {'analysis alone (' + report.source + ')':<40}{alone:6.2f} s")
    print(f"   same SQL over every sample              {every:6.2f} s")
    print(f"   {report.conclusion()}")


# --- 3. the run page -------------------------------------------------------------------------

def fill_steps(dsn: str, run: Run, steps: int) -> None:
    rng = np.random.default_rng(1)
    ranks = np.tile(np.arange(run.ranks, dtype=np.int32), steps)
    step = np.repeat(np.arange(steps, dtype=np.uint64), run.ranks)
    t0 = int(run.t0().timestamp() * 1e6)
    ts = t0 + (step.astype(np.int64) * 300_000_000 // max(steps, 1))
    loss = 4.0 * np.exp(-3.0 * step.astype(np.float64) / max(steps, 1)) + rng.normal(
        0, 0.05, step.size)
    size = step.size
    table = pa.table({
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")), "run": _const(run.run, size),
        "role": _const("worker", size), "rank": pa.array(ranks), "step": pa.array(step),
        "pod": per_rank(ranks, run.pod, run.ranks), "node": per_rank(ranks, run.node, run.ranks),
        "loss": pa.array(loss), "step_time_s": pa.array(rng.normal(0.3, 0.01, size)),
        "samples_per_s": pa.array(np.full(size, 32.0)),
        "tokens_per_s": pa.array(np.full(size, 32.0 * 2048)),
    })
    with opened(dsn) as store:
        seconds, _ = timed(lambda: [store.insert_arrow("train_steps", table.slice(s, CHUNK))
                                    for s in range(0, size, CHUNK)])
    print(f"   {size:,} training-step rows inserted in {seconds:.1f} s")


def _const(value: str, size: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(size, np.int32)), pa.array([value]))


def page_figures(dsn: str, run: Run, steps: int, repeat: int) -> None:
    try:
        from runtime.telemetry.ui import data
    except ImportError as error:
        print(f"   skipped: gkr-ui's data module is not importable ({error})")
        return
    with opened(dsn) as store:
        queries: dict[str, Callable[[], Any]] = {
            "runs list (ui_runs.sql)": lambda: data.runs(store),
            "whole run page (data.run_page)": lambda: data.run_page(store, run.run),
            "  loss/throughput curves (ui_steps)": lambda: store.query(
                sql_file("ui_steps.sql"), {"run": run.run, "bucket": max(
                    1, -(-steps // data.MAX_POINTS))}),
            "  pods and nodes (ui_placement)": lambda: store.query(
                sql_file("ui_placement.sql"), {"run": run.run}),
            "  run summary (ui_runs, one run)": lambda: data.summary(store, run.run),
            "heatmap + stragglers (straggler_view)": lambda: data.straggler_view(
                store, run.run, 30),
        }
        for label, query in queries.items():
            seconds, _ = timed(query, repeat)
            print(f"   {label:<40}{seconds:6.2f} s   goal < 1 s: "
                  f"{verdict(seconds, QUERY_GOAL, True)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=10_000)
    parser.add_argument("--collectives", type=int, default=1_000,
                        help="collectives per rank (samples = ranks x collectives)")
    parser.add_argument("--steps", type=int, default=1_000, help="training steps per rank")
    parser.add_argument("--ingest-rows", type=int, default=2_000_000)
    parser.add_argument("--inspector-files", type=int, default=64)
    parser.add_argument("--inspector-records", type=int, default=4_000,
                        help="records per NCCL Inspector file")
    parser.add_argument("--fleet-nodes", type=int, default=1_280, help="nodes of 8 ranks")
    parser.add_argument("--fleet-windows", type=int, default=120, help="30 s windows")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="inspector,ingest,stragglers,ui,fleet")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (figures are the best "
          f"of {args.repeat})")
    folder = Path(tempfile.mkdtemp(prefix="gkr-bench-telemetry-"))
    try:
        dsn = f"chdb://{folder / 'store'}"
        if "inspector" in parts:
            inspector_figures(folder, args.inspector_files, args.inspector_records,
                              args.repeat)
        if "ingest" in parts:
            ingest(f"chdb://{folder / 'ingest'}", args.ingest_rows, args.repeat)
        run = make_run(args.ranks, args.collectives)
        if parts & {"stragglers", "ui"}:
            print(f"2. gkr stragglers over {args.ranks:,} ranks x {args.collectives:,} "
                  "collectives")
            fill(dsn, run)
        if "stragglers" in parts:
            straggler_figures(dsn, run, args.repeat)
        if "ui" in parts:
            print(f"3. gkr-ui's run page ({args.ranks:,} ranks, {args.steps:,} steps)")
            fill_steps(dsn, run, args.steps)
            page_figures(dsn, run, args.steps, args.repeat)
        if "fleet" in parts:
            fleet_figures(f"chdb://{folder / 'fleet'}", args.fleet_nodes, args.fleet_windows,
                          args.repeat)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
