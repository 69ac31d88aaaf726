"""Straggler analysis (seed §8.3) over a run's collective samples.

The method is SQL in `sql/straggler_windows.sql` and `sql/straggler_ranks.sql`, so an engineer
or an agent can run and refine it with `gkr telemetry sql`; this module picks the table those
queries read (`sql/straggler_source.sql`: when they hold all of the run's samples, the
30-second group buckets of migration 0010 for a window that is a multiple of 30 s, the
10-second per-rank buckets of migration 0003 for another multiple of 10 s; else every sample;
all give the same answer), runs both, and
types the result for the CLI and gkr-ui. Ranks are global training ranks, also where a source
such as NCCL Inspector gives ranks within communicators (see the SQL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from runtime.errors import Category, RuntimeFailure
from runtime.telemetry.store import Rows, Store, describe, sql_file

DEFAULT_WINDOW_S = 30
GROUP_BUCKET_S, BUCKET_S = 30, 10  # schema/0010_collective_groups.sql, 0003
GROUPS, BUCKETS, SAMPLES = "collective_group_buckets", "collective_buckets", "collective_samples"
EVERY_GROUP = 2**32 - 1  # straggler_windows.sql's groups_per_window keeping all
PERSISTENT_SHARE = 0.5  # last in more than half of its groups: a persistent straggler (two
# ranks of equal speed are each last in about half)


class NoSamples(RuntimeFailure):
    """The run has no collective samples to analyse."""

    category = Category.INVALID_INPUT


class BadWindow(RuntimeFailure):
    """The window is not a whole number of seconds, at least one."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class Window:
    """One collective group in one window: who arrived last and what the others waited."""

    window_start: datetime  # timezone-aware UTC
    comm_id: str
    comm_name: str
    coll: str
    msg_size_bytes: int
    algo: str
    ranks: int
    last_rank: int
    transfer_us: float
    skew_us: float
    wait_p50_us: float
    waiting_us: tuple[tuple[int, float], ...]  # (rank, waiting), in rank order


@dataclass(frozen=True)
class RankSummary:
    """One rank across all windows: how often and by how much it arrived last."""

    rank: int
    pod: str
    node: str
    times_last: int
    groups: int
    share_last: float
    windows_last: int
    windows_seen: int
    mean_skew_us: float
    max_skew_us: float
    mean_waiting_us: float


@dataclass(frozen=True)
class StragglerReport:
    """Per-window results and the ranks ordered from most to least persistent straggler."""

    run: str
    window_s: int
    source: str  # the table read: GROUPS, BUCKETS or SAMPLES
    windows: tuple[Window, ...]
    ranks: tuple[RankSummary, ...]

    @property
    def window_count(self) -> int:
        """Distinct windows with at least one group of two or more ranks."""
        return len({window.window_start for window in self.windows})

    def persistent(self, min_share: float = PERSISTENT_SHARE) -> tuple[RankSummary, ...]:
        """The ranks that arrived last in more than `min_share` of their groups."""
        return tuple(r for r in self.ranks if r.share_last > min_share)

    def conclusion(self) -> str:
        """One line: the persistent straggler, or that there is none and who came closest."""
        top = self.ranks[0]
        placed = ", ".join(f"{what} {name}" for what, name in (("pod", top.pod),
                                                                ("node", top.node)) if name)
        where = f"rank {top.rank}" + (f" ({placed})" if placed else "")
        how = (f"{top.windows_last}/{self.window_count} windows ({top.times_last}/{top.groups} "
               f"collective groups), mean skew {top.mean_skew_us / 1000:.1f} ms")
        if top.share_last > PERSISTENT_SHARE:
            return f"{where} arrived last in {how}"
        return f"no persistent straggler: {where} arrived last most often, in {how}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data (times as RFC 3339 UTC), for `-o json` and the UI."""
        data = asdict(self)
        for window in data["windows"]:
            window["window_start"] = window["window_start"].isoformat().replace("+00:00", "Z")
        data["conclusion"] = self.conclusion()
        return data


# Picks the ranks whose waiting to fetch from the ranks table (most persistent first).
RankPicker = Callable[[Sequence[RankSummary]], Iterable[int]]


def analyze(store: Store, run: str, window_s: int = DEFAULT_WINDOW_S, waiting: bool = True,
            waiting_ranks: Iterable[int] | RankPicker | None = None,
            groups_per_window: int | None = None) -> StragglerReport:
    """Run the straggler analysis of one run over windows of `window_s` seconds. The windows
    carry every rank's waiting (`Window.waiting_us`), which at thousands of ranks is most of
    the work: without `waiting`, none; with `waiting_ranks`, only those ranks' (given, or
    picked from the ranks table, as gkr-ui picks the rows of its heatmap). With
    `groups_per_window`, each window keeps only that many of its groups, those of largest
    skew (a fleet's 1,288 communicators make 1,288 groups a window); the ranks are the same."""
    if window_s < 1:
        raise BadWindow(f"window {window_s}s: must be at least 1 second")
    table = source(store, run, window_s)
    # The SQL's per-rank branch reads `rows`, which must name a table of per-rank rows also
    # when the group buckets are read (its condition on `source` is then false).
    parameters: dict[str, Any] = {
        "run": run, "window_s": window_s, "source": table,
        "rows": BUCKETS if table == GROUPS else table,
        "groups_per_window": EVERY_GROUP if groups_per_window is None else groups_per_window}
    ranks_sql = sql_file("straggler_ranks.sql")
    if callable(waiting_ranks):  # picked from the ranks: those first
        ranks = _ranks(store.query(ranks_sql, parameters))
        found = store.query(_windows_sql(parameters, ranks, waiting, waiting_ranks), parameters)
    else:  # side by side (Store.queries)
        windows_sql = _windows_sql(parameters, (), waiting, waiting_ranks)
        ranked, found = store.queries((ranks_sql, parameters), (windows_sql, parameters))
        ranks = _ranks(ranked)
    windows = found.dicts()
    if not windows:
        raise _no_samples(store, run, "from two or more ranks of one group ")
    return StragglerReport(run, window_s, table, tuple(_window(w) for w in windows), ranks)


def _ranks(rows: Rows) -> tuple[RankSummary, ...]:
    return tuple(RankSummary(**row) for row in rows.dicts())


def _windows_sql(parameters: dict[str, Any], ranks: Sequence[RankSummary], waiting: bool,
                 waiting_ranks: Iterable[int] | RankPicker | None) -> str:
    """The windows query with the waiting asked for (all, some ranks' or none)."""
    windows_sql = sql_file("straggler_windows.sql")
    if not waiting:  # ClickHouse then never computes the column (see the file)
        return f"SELECT * EXCEPT (waiting_us) FROM (\n{windows_sql}\n)"
    if waiting_ranks is not None:
        picked = waiting_ranks(ranks) if callable(waiting_ranks) else waiting_ranks
        parameters["waiting_ranks"] = sorted(set(picked))
        return _waiting_of_some(windows_sql)
    return windows_sql


def _waiting_of_some(windows_sql: str) -> str:
    """The windows query keeping the waiting of {waiting_ranks} only: filtered in the query,
    the rest never leaves it."""
    return (f"SELECT * REPLACE (arrayFilter(w -> has({{waiting_ranks:Array(Int32)}}, w.1), "
            f"waiting_us) AS waiting_us) FROM (\n{windows_sql}\n)")


def source(store: Store, run: str, window_s: int) -> str:
    """The table the analysis of `run` reads (see sql/straggler_source.sql)."""
    samples, bucketed, grouped = store.query(sql_file("straggler_source.sql"),
                                             {"run": run}).rows[0]
    if not samples:
        raise _no_samples(store, run, "")
    if samples == grouped and window_s % GROUP_BUCKET_S == 0:
        return GROUPS
    return BUCKETS if samples == bucketed and window_s % BUCKET_S == 0 else SAMPLES


def _window(row: dict[str, Any]) -> Window:
    start = row["window_start"]
    start = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
    # (rank, waiting) tuples already: clickhouse-connect gives a Tuple(Int32, Float64) so.
    return Window(**{**row, "window_start": start,
                     "waiting_us": tuple(row.get("waiting_us", ()))})


def _no_samples(store: Store, run: str, which: str) -> NoSamples:
    return NoSamples(
        f"run {run!r} has no collective samples {which}in the telemetry store "
        f"{describe(store.dsn)}; list the runs with `gkr telemetry sql \"SELECT run, count() FROM "
        f"collectives GROUP BY run\"`, or load NCCL Inspector logs with `gkr telemetry "
        f"ingest inspector PATH --run {run}`")
