"""The straggler analysis of issue 27 (sql/straggler_*.sql over the group buckets of migration
0010) gives the answers of the one before it, kept as the oracle in tests/telemetry/oracle/
(the files as they were at the issue, over the per-rank buckets of migration 0003 or every
sample): every window's groups, last arrivers, skews and waiting, and every rank's summary, on
each table the analysis may read, for a run of global ranks and for a fleet's job as NCCL
Inspector reports it (ranks within communicators, with and without the processes' global
ranks announced)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.telemetry import stragglers
from runtime.telemetry.store import Store, sql_file
from testing.synthetic import FleetJob, Straggler, fleet_samples, samples
from tests.telemetry.test_stragglers import RUN

ORACLE = Path(__file__).parent / "oracle"
# A job of 48 ranks on 6 nodes: 14 communicators, a persistent straggler and, later still in
# two windows, another rank of another node.
JOB = FleetJob(run="job", nodes=6, windows=6,
               stragglers=(Straggler(9, 15_000.0), Straggler(44, 25_000.0, (2, 3))))
UNMAPPED = FleetJob(run="unmapped", nodes=6, windows=6, stragglers=JOB.stragglers, seed=3)
# Per window length, the tables the analysis can read it from.
SOURCES = {30: (stragglers.GROUPS, stragglers.BUCKETS, stragglers.SAMPLES),
           60: (stragglers.GROUPS, stragglers.BUCKETS, stragglers.SAMPLES),
           20: (stragglers.BUCKETS, stragglers.SAMPLES), 15: (stragglers.SAMPLES,)}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    folder = tmp_path_factory.mktemp("oracle")
    with Store.connect(f"chdb://{folder / 'store'}") as opened:
        opened.insert_arrow("collectives", samples(RUN))
        for job in (JOB, UNMAPPED):
            for table in fleet_samples(job):
                opened.insert_arrow("collectives", table)
        opened.insert("rank_processes", JOB.processes())
        yield opened


def _oracle(store: Store, run: str, window_s: int) -> tuple[list[dict[str, Any]], ...]:
    old_source = "collective_buckets" if window_s % 10 == 0 else "collective_samples"
    parameters = {"run": run, "window_s": window_s, "source": old_source}
    return tuple(store.query((ORACLE / f"straggler_{name}.sql").read_text(), parameters).dicts()
                 for name in ("windows", "ranks"))


def _new(store: Store, run: str, window_s: int, source: str) -> tuple[list[dict[str, Any]], ...]:
    parameters = {"run": run, "window_s": window_s, "source": source,
                  "rows": stragglers.BUCKETS if source == stragglers.GROUPS else source,
                  "groups_per_window": stragglers.EVERY_GROUP}
    return tuple(store.query(sql_file(f"straggler_{name}.sql"), parameters).dicts()
                 for name in ("windows", "ranks"))


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, float) or isinstance(new, float):
        return math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(old, list | tuple):
        return len(old) == len(new) and all(map(_same, old, new))
    if hasattr(old, "tzinfo"):  # DateTime64 and DateTime columns decode with and without zone
        return old.replace(tzinfo=None) == new.replace(tzinfo=None)
    return bool(old == new)


def _differences(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    found = [f"{len(old)} rows, now {len(new)}"] if len(old) != len(new) else []
    found += [f"row {i} {key}: {before[key]!r}, now {after[key]!r}"
              for i, (before, after) in enumerate(zip(old, new, strict=False))
              for key in before if not _same(before[key], after[key])]
    return found[:5]


@pytest.mark.parametrize("run", [RUN.run, JOB.run, UNMAPPED.run])
@pytest.mark.parametrize("window_s", sorted(SOURCES))
def test_every_source_gives_the_oracles_answers(store: Store, run: str, window_s: int) -> None:
    old_windows, old_ranks = _oracle(store, run, window_s)
    assert old_windows and old_ranks
    for source in SOURCES[window_s]:
        windows, ranks = _new(store, run, window_s, source)
        assert _differences(old_windows, windows) == [], (source, "windows")
        assert _differences(old_ranks, ranks) == [], (source, "ranks")


def test_the_analysis_reads_the_group_buckets_and_names_global_ranks(store: Store) -> None:
    report = stragglers.analyze(store, JOB.run, 30)
    assert report.source == stragglers.GROUPS
    assert len(report.windows) == JOB.windows * JOB.communicators
    assert [r.rank for r in report.persistent()] == [9]
    for window in report.windows:
        index = int((window.window_start - JOB.t0()).total_seconds()) // JOB.window_s
        if window.comm_id in ("0xtp00001", "0xdp00001"):  # rank 9: node 1, local rank 1
            assert window.last_rank == 9
        if window.comm_id in ("0xtp00005", "0xdp00004") and index in (2, 3):  # rank 44
            assert window.last_rank == 44
