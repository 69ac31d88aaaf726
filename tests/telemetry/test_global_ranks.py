"""Stragglers of communicators smaller than the run, as NCCL Inspector reports them: each
record's `rank` is the writing process's rank within its communicator, so two communicators of
half the ranks each both have a rank 3. The logs are written as the plugin writes them, one
`<hostname>-pid<PID>.log` per process, loaded with `gkr telemetry ingest`'s loader into a real
chDB store; each training process says which global rank it is as a training rank's telemetry
does (runtime.telemetry.inspector.announce_process), and the analysis names global ranks."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from runtime.identity import Identity
from runtime.telemetry import ingest, inspector
from runtime.telemetry.store import Store
from runtime.telemetry.stragglers import StragglerReport, analyze
from runtime.telemetry.writer import StoreSink, TelemetryWriter

WINDOW_S, WINDOWS, OPS = 30, 3, 4  # OPS collectives per window
DELAY_US, NOISE_US, TRANSFER_US = 20_000.0, 300.0, 5_000.0


@dataclass(frozen=True)
class Layout:
    """Global ranks 0..2n-1 on pods of 4; communicator A holds the even ranks, B the odd ones,
    each rank i of a communicator being its i-th member; `slow` arrives late at every
    collective of A."""

    per_comm: int
    slow_in_comm: int

    @property
    def members(self) -> dict[str, list[int]]:
        ranks = range(2 * self.per_comm)
        return {"0xa": [g for g in ranks if g % 2 == 0], "0xb": [g for g in ranks if g % 2]}

    @property
    def slow(self) -> int:
        return self.members["0xa"][self.slow_in_comm]

    @staticmethod
    def host(rank: int) -> str:
        return f"trainer-w-{rank // 4}"  # a pod's host name is the pod's name

    @staticmethod
    def pid(rank: int) -> int:
        return 7000 + rank


def start() -> datetime:
    """A whole minute an hour ago: recent (the tables have TTLs), windows aligned."""
    return datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)


def record(comm: str, comm_rank: int, n_ranks: int, rank: int, sn: int, ts_us: int,
           exec_us: float) -> str:
    """One record in the plugin's JSON (reference/telemetry.md §1)."""
    return json.dumps({
        "header": {"id": comm, "comm_name": f"DP {comm}", "rank": comm_rank,
                   "n_ranks": n_ranks, "nnodes": 2},
        "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": ts_us,
                     "hostname": Layout.host(rank), "pid": Layout.pid(rank)},
        "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 16 << 20,
                      "coll_exec_time_us": round(exec_us, 3), "coll_timing_source": "kernel_gpu",
                      "coll_algobw_gbs": 3.2, "coll_busbw_gbs": 6.4}}, separators=(",", ":"))


def write_logs(folder: Path, layout: Layout) -> Path:
    """Every process's log: a late rank waits least, so its time is the shortest."""
    rng = np.random.default_rng(7)
    lines: dict[int, list[str]] = {}
    t0 = int(start().timestamp() * 1e6)
    for comm, members in layout.members.items():
        for op in range(WINDOWS * OPS):
            arrival = rng.exponential(NOISE_US, len(members))
            arrival[[i for i, g in enumerate(members) if g == layout.slow]] += DELAY_US
            ts = t0 + int((op + 0.5) / OPS * WINDOW_S * 1e6)
            for i, rank in enumerate(members):
                exec_us = arrival.max() - arrival[i] + TRANSFER_US
                lines.setdefault(rank, []).append(
                    record(comm, i, len(members), rank, op + 1, ts, exec_us))
    folder.mkdir()
    for rank, records in lines.items():
        path = folder / f"{Layout.host(rank)}-pid{Layout.pid(rank)}.log"
        path.write_text("\n".join(records) + "\n")
    return folder


def announce(store: Store, run: str, ranks: range) -> None:
    """What each rank's announce_process writes: its host name and pid under its identity."""
    store.insert(inspector.PROCESSES_TABLE, [
        {"ts": start(), **Identity(run=run, rank=rank, role="worker",
                                   pod=Layout.host(rank)).row(),
         "hostname": Layout.host(rank), "pid": Layout.pid(rank)} for rank in ranks])


@dataclass(frozen=True)
class Analysed:
    layout: Layout
    mapped: StragglerReport  # the processes announced their ranks
    unmapped: StragglerReport  # the same logs, no announcement


# Communicators of 4 out of 8 ranks, and of 72 out of 144 (the analysis before issue 27 summed
# communicators of up to 64 ranks apart from larger ones: tests/telemetry/oracle).
@pytest.fixture(scope="module", params=[Layout(4, 3), Layout(72, 70)], ids=["4of8", "72of144"])
def analysed(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Analysed:
    layout: Layout = request.param
    folder = tmp_path_factory.mktemp("inspector")
    logs = write_logs(folder / "logs", layout)
    with Store.connect(f"chdb://{folder / 'store'}") as store:  # closed: chDB opens one
        for run in ("mapped", "unmapped"):                      # folder at a time
            ingest.ingest(store, ingest.Kind.INSPECTOR, [logs], Identity(run=run))
        announce(store, "mapped", range(2 * layout.per_comm))
        return Analysed(layout, analyze(store, "mapped", WINDOW_S),
                        analyze(store, "unmapped", WINDOW_S))


def test_the_slow_rank_is_found_as_its_global_rank(analysed: Analysed) -> None:
    layout, report = analysed.layout, analysed.mapped
    assert [r.rank for r in report.persistent()] == [layout.slow]
    top = report.ranks[0]
    assert (top.rank, top.pod) == (layout.slow, Layout.host(layout.slow))  # the record's
    assert (top.times_last, top.groups, top.windows_last) == (WINDOWS, WINDOWS, WINDOWS)
    assert sorted(r.rank for r in report.ranks) == list(range(2 * layout.per_comm))
    assert all(r.groups == WINDOWS for r in report.ranks)  # each rank is in one communicator
    assert report.conclusion().startswith(f"rank {layout.slow} (pod {Layout.host(layout.slow)}")


def test_each_window_names_global_ranks_of_its_own_communicator(analysed: Analysed) -> None:
    layout = analysed.layout
    windows = analysed.mapped.windows
    assert sorted(w.comm_id for w in windows) == ["0xa"] * WINDOWS + ["0xb"] * WINDOWS
    for window in windows:
        members = layout.members[window.comm_id]
        assert [rank for rank, _ in window.waiting_us] == members
        assert window.ranks == len(members) and window.last_rank in members
        if window.comm_id == "0xa":
            assert window.last_rank == layout.slow
            assert DELAY_US * 0.8 < window.skew_us < DELAY_US * 1.2


def test_without_the_announcements_the_communicator_ranks_merge(analysed: Analysed) -> None:
    """The control: the same records alone give ranks within the communicators, where the
    slow rank and the other communicator's rank of the same index are one row."""
    layout, report = analysed.layout, analysed.unmapped
    assert sorted(r.rank for r in report.ranks) == list(range(layout.per_comm))
    top = report.ranks[0]
    assert (top.rank, top.groups) == (layout.slow_in_comm, 2 * WINDOWS)


def test_a_rank_announces_the_process_its_records_name(tmp_path: Path) -> None:
    """announce_process through a rank's real writer into the store: the host name and pid
    are this process's, as NCCL Inspector writes them, under the rank's global rank."""
    dsn = f"chdb://{tmp_path / 'store'}"
    writer = TelemetryWriter(StoreSink(dsn), Identity(run="r", rank=12, role="worker"))
    inspector.announce_process(writer)
    writer.close()
    with Store.connect(dsn) as store:
        rows = store.query("SELECT run, rank, hostname, pid FROM rank_processes").rows
    assert rows == [("r", 12, socket.gethostname(), os.getpid())]
