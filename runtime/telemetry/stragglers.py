"""Straggler analysis (seed §8.3) over the `collectives` table.

The method is SQL in `sql/straggler_windows.sql` and `sql/straggler_ranks.sql`, so an engineer
or an agent can run and refine it with `gkr telemetry sql`; this module runs both and types
the result for the CLI and gkr-ui.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from importlib import resources
from typing import Any

from runtime.errors import Category, RuntimeFailure
from runtime.telemetry.store import Store

DEFAULT_WINDOW_S = 30


class NoSamples(RuntimeFailure):
    """The run has no collective samples to analyse."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class Window:
    """One collective group in one window: who arrived last and what the others waited."""

    window_start: datetime
    comm_id: str
    comm_name: str
    coll: str
    msg_size_bytes: int
    algo: str
    ranks: int
    last_rank: int
    transfer_us: float
    skew_us: float
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
    mean_skew_us: float
    max_skew_us: float
    mean_waiting_us: float


@dataclass(frozen=True)
class StragglerReport:
    """Per-window results and the ranks ordered from most to least persistent straggler."""

    run: str
    window_s: int
    windows: tuple[Window, ...]
    ranks: tuple[RankSummary, ...]

    def persistent(self, min_share: float = 0.5) -> tuple[RankSummary, ...]:
        """The ranks that arrived last in at least `min_share` of their groups."""
        return tuple(r for r in self.ranks if r.times_last and r.share_last >= min_share)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (times as RFC 3339), for `-o json` and the UI."""
        data = asdict(self)
        for window in data["windows"]:
            window["window_start"] = window["window_start"].isoformat()
        return data


def sql(name: str) -> str:
    """The text of one analysis query under `sql/`."""
    return (resources.files("runtime.telemetry") / "sql" / name).read_text(encoding="utf-8")


def analyze(store: Store, run: str, window_s: int = DEFAULT_WINDOW_S) -> StragglerReport:
    """Run the straggler analysis of one run over windows of `window_s` seconds."""
    if window_s < 1:
        raise RuntimeFailure(f"window {window_s}s: must be at least 1 second")
    parameters = {"run": run, "window_s": window_s}
    windows = store.query(sql("straggler_windows.sql"), parameters).dicts()
    if not windows:
        raise NoSamples(
            f"run {run!r} has no collective samples from two or more ranks in "
            f"{store.dsn}; list runs with `gkr telemetry sql \"SELECT DISTINCT run FROM "
            f"collectives\"`, or load inspector logs with `gkr telemetry ingest`"
        )
    ranks = store.query(sql("straggler_ranks.sql"), parameters).dicts()
    return StragglerReport(
        run, window_s,
        tuple(Window(**{**w, "waiting_us": tuple(map(tuple, w["waiting_us"]))}) for w in windows),
        tuple(RankSummary(**r) for r in ranks),
    )
