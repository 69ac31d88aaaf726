"""The fleet's straggler benchmark (benchmarks/fleet/stragglers.py) at a reduced size: 32 nodes
(256 ranks) over 12 windows, written through the ranks' paths (NCCL Inspector records into
`nccl_raw`, training steps in the writer's batches). The injected stragglers are found exactly,
by `gkr stragglers`' analysis and by the pandas baseline."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from benchmarks.fleet import Fleet
from benchmarks.fleet.stragglers import (
    PIECE,
    STEP_S,
    Hour,
    Ingested,
    ingest,
    measure,
    mismatches,
    pandas_last_arrivers,
)
from runtime.telemetry.store import Store
from runtime.telemetry.stragglers import StragglerReport, analyze

FLEET = Fleet(32)
HOUR = Hour.of(FLEET, windows=12)
GROUPS = 3  # testing/synthetic.py's DEFAULT_GROUPS, which the hour uses


@dataclass(frozen=True)
class Analysed:
    """The hour ingested into a store, analysed, and the store closed again."""

    loaded: Ingested
    counts: dict[str, int]
    report: StragglerReport
    pandas: set[int]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> Analysed:
    folder = tmp_path_factory.mktemp("fleet-stragglers") / "store"
    with Store.connect(f"chdb://{folder}") as store:  # closed: chDB opens one folder at a time
        loaded = ingest(store, HOUR)
        report = analyze(store, HOUR.run, HOUR.window_s, waiting=False)
        counts = dict(store.query("SELECT 'collectives', count() FROM collectives UNION ALL "
                                  "SELECT 'train_steps', count() FROM train_steps").rows)
        return Analysed(loaded, counts, report, pandas_last_arrivers(store, HOUR))


def test_the_injected_stragglers_and_no_other_are_found(analysed: Analysed) -> None:
    persistent, node, late = HOUR.incidents
    per_window = HOUR.window_s // STEP_S
    assert analysed.loaded.collectives == analysed.counts["collectives"] == \
        256 * 12 * GROUPS * per_window
    assert analysed.loaded.steps == analysed.counts["train_steps"] == 256 * 12 * per_window
    report = analysed.report
    assert mismatches(HOUR, report) == []
    assert [r.rank for r in report.persistent()] == list(persistent.ranks)
    named = {r.rank for r in report.ranks if r.times_last}
    assert set(persistent.ranks) | set(late.ranks) <= named <= {*persistent.ranks,
                                                                 *node.ranks, *late.ranks}
    slow_node = FLEET.node_names()[node.ranks[0] // FLEET.gpus_per_node]
    assert {r.node for r in report.ranks if r.rank in node.ranks and r.times_last} == \
        {slow_node}
    assert analysed.pandas == named  # the baseline the benchmark compares with agrees


def test_a_straggler_that_was_not_injected_is_reported_as_a_mismatch(
        analysed: Analysed) -> None:
    """The check is not vacuous: held against an hour without the slow node, the same rows
    name ranks that were not injected, and windows whose last arriver is unexpected."""
    without_node = replace(HOUR, incidents=(HOUR.incidents[0], HOUR.incidents[2]))
    problems = mismatches(without_node, analysed.report)
    assert any(p.startswith("ranks named that were not injected") for p in problems)
    assert sum(p.startswith("window ") for p in problems) == GROUPS * len(
        HOUR.incidents[1].windows)


@pytest.mark.slow
def test_measure_runs_gkr_stragglers_as_a_user_and_gives_the_figures() -> None:
    figures = {f.name: f for f in measure(Fleet(8), windows=6, repeat=1)}  # raises on a miss
    assert all(f.piece == PIECE for f in figures.values())
    command = figures["gkr stragglers (CLI, fresh process)"]
    assert command.goal == 2.0 and command.value > figures["analysis alone (in process)"].value
    assert figures["ingest: collective samples"].value == 64 * 6 * GROUPS * 3
