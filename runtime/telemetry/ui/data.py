"""What gkr-ui's pages show, read from the telemetry store.

The queries are the `sql/ui_*.sql` files (reusable with `gkr telemetry sql`); this module picks
their resolution (a long run draws about a thousand points, not a million) and shapes the rows
for the page. The straggler heatmap is `stragglers.analyze` folded into rank-by-window cells;
the sample ledger's verdict is `ledger_store.run_verdict`'s, in its own words.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from runtime.errors import Category, RuntimeFailure
from runtime.telemetry import ledger_store, stragglers
from runtime.telemetry.store import Store, describe, sql_file
from runtime.telemetry.stragglers import RankSummary, StragglerReport

MAX_POINTS = 1000  # points per curve: more than a chart's width in pixels gains nothing
RUNS_LIMIT = 500
EVENTS_LIMIT = 200
HEATMAP_RANKS = 64  # rows: the most persistent stragglers first, then shown in rank order
HEATMAP_WINDOWS = 240  # columns: the latest windows
CHART_RANKS = 8  # per-rank curves: the slowest ranks by tokens/s (more lines are unreadable)


class UnknownRun(RuntimeFailure):
    """No telemetry table holds a row of this run."""

    category = Category.INVALID_INPUT


def runs(store: Store, limit: int = RUNS_LIMIT) -> list[dict[str, Any]]:
    """Every run in the store, newest first."""
    return store.query(sql_file("ui_runs.sql"), {"run": "", "limit": limit}).dicts()


def events(store: Store, run: str = "", limit: int = EVENTS_LIMIT) -> list[dict[str, Any]]:
    """The latest events, of one run or ('') of all."""
    return store.query(sql_file("ui_events.sql"), {"run": run, "limit": limit}).dicts()


def summary(store: Store, run: str) -> dict[str, Any]:
    """One run's line of the runs list; `UnknownRun` when the store has none of it."""
    found = store.query(sql_file("ui_runs.sql"), {"run": run, "limit": 1}).dicts()
    if not found:
        raise UnknownRun(f"run {run!r} has no telemetry in {describe(store.dsn)}")
    return found[0]


def run_page(store: Store, run: str) -> dict[str, Any]:
    """Everything a run's page draws but the straggler analysis (asked for separately: its
    window is the user's choice)."""
    about = summary(store, run)
    return {
        "summary": about,
        "steps": store.query(sql_file("ui_steps.sql"),
                             {"run": run, "bucket": _bucket(about["last_step"] or 0)}).dicts(),
        "fleet": _by_service(store.query(sql_file("ui_fleet.sql"), {
            "run": run, "bucket_s": _bucket(_seconds(about["first_ts"], about["last_ts"]))
        }).dicts()),
        "health": store.query(sql_file("ui_fleet_health.sql"), {"run": run}).dicts(),
        "placement": store.query(sql_file("ui_placement.sql"), {"run": run}).dicts(),
        "ranks": rank_view(store, run, about["last_step"] or 0),
        "events": events(store, run),
        "ledger": ledger_view(store, run),
    }


def ledger_view(store: Store, run: str) -> dict[str, Any]:
    """Whether the run trained every sample exactly once (`available` False, with the reason,
    when it has no ledger): the verdict's headline and its explanation."""
    try:
        verdict = ledger_store.run_verdict(store, [run])
    except ledger_store.NoLedger as error:
        return {"available": False, "message": str(error)}
    return {"available": True, "exactly_once": verdict.exactly_once,
            "headline": verdict.headline(), "text": verdict.explain()}


def rank_view(store: Store, run: str, last_step: int) -> dict[str, Any]:
    """Every training rank's throughput, and the curves of the slowest few (by tokens/s)."""
    table = store.query(sql_file("ui_ranks.sql"), {"run": run}).dicts()
    shown = chart_ranks(table)
    curves = store.query(sql_file("ui_rank_steps.sql"), {
        "run": run, "ranks": shown, "bucket": _bucket(last_step)}).dicts() if shown else []
    by_rank: dict[int, list[dict[str, Any]]] = {rank: [] for rank in shown}
    for row in curves:
        by_rank[row.pop("rank")].append(row)
    return {"table": table, "curves": [{"rank": r, "steps": by_rank[r]} for r in shown],
            "ranks_total": len(table)}


def chart_ranks(table: Sequence[dict[str, Any]]) -> list[int]:
    """The ranks drawn: the CHART_RANKS slowest by mean tokens/s, in rank order."""
    slowest = sorted(table, key=lambda row: (row["tokens_per_s_mean"], row["rank"]))
    return sorted(row["rank"] for row in slowest[:CHART_RANKS])


def _bucket(extent: float) -> int:
    """Steps (or seconds) per point so that `extent` draws at most MAX_POINTS points."""
    return max(1, math.ceil(extent / MAX_POINTS))


def _seconds(first: datetime, last: datetime) -> float:
    return max(0.0, (last - first).total_seconds())


def _by_service(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row.pop("service"), []).append(row)
    return grouped


def straggler_view(store: Store, run: str, window_s: int) -> dict[str, Any]:
    """The heatmap and the persistent-straggler table; `available` is False (with the
    analysis's reason) when the run has no collective samples from two ranks."""
    summary(store, run)  # an unknown run is a 404, not "no samples"
    try:
        # Only the heatmap's rows' waiting: at 10,000 ranks, all of it is millions of values.
        report = stragglers.analyze(store, run, window_s, waiting_ranks=heatmap_ranks)
    except stragglers.NoSamples as error:
        return {"available": False, "window_s": window_s, "message": str(error)}
    persistent = {r.rank for r in report.persistent()}
    return {
        "available": True, "window_s": window_s, "heatmap": heatmap(report),
        "ranks": [{**asdict(r), "persistent": r.rank in persistent} for r in report.ranks],
    }


def heatmap_ranks(ranks: Sequence[RankSummary]) -> list[int]:
    """The heatmap's rows: the most persistent stragglers, in rank order."""
    return sorted(r.rank for r in ranks[:HEATMAP_RANKS])


def heatmap(report: StragglerReport) -> dict[str, Any]:
    """Rank-by-window cells. A cell's `late_us` is how much later than the window's first
    arriver the rank came, averaged over the window's collective groups: skew - waiting, so
    the last arriver's cell is the skew and the first arriver's is 0. `last` counts the
    groups the rank arrived last in, `groups` the groups it took part in."""
    every = sorted({w.window_start for w in report.windows})
    starts = every[-HEATMAP_WINDOWS:]
    shown = heatmap_ranks(report.ranks)
    column = {start: i for i, start in enumerate(starts)}
    row = {rank: i for i, rank in enumerate(shown)}
    late = [[0.0] * len(starts) for _ in shown]
    last = [[0] * len(starts) for _ in shown]
    groups = [[0] * len(starts) for _ in shown]
    for window in report.windows:
        c = column.get(window.window_start)
        for rank, waiting in window.waiting_us:
            r = row.get(rank)
            if c is None or r is None:
                continue
            late[r][c] += window.skew_us - waiting
            last[r][c] += rank == window.last_rank
            groups[r][c] += 1
    mean = [[total / n if n else None for total, n in zip(lr, gr, strict=True)]
            for lr, gr in zip(late, groups, strict=True)]
    return {"windows": starts, "ranks": shown, "late_us": mean, "last": last, "groups": groups,
            "windows_total": len(every), "ranks_total": len(report.ranks)}
