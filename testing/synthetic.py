"""Synthetic collective samples with known stragglers, in the `collectives` table's shape.

A model of what NCCL Inspector measures (reference/telemetry.md §6): in each collective every
rank arrives at some time, the collective completes once the last rank has arrived and the
transfer is done, and each rank's measured time is its wait for the last arrival plus the
transfer. So a rank that arrives late has the shortest time. Arrival noise is exponential
(most ranks on time, a few a little late); a persistent straggler arrives `delay_us` late in
every collective, an intermittent one `delay_us` late in the windows it is slow in.

Built with numpy into one pyarrow Table (identifiers as dictionaries, which clickhouse-connect
sends as Arrow dictionaries and ClickHouse reads into LowCardinality columns), so millions of
rows take a second or two to make and insert.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa

GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Group:
    """One collective group: communicator, collective, message size, and its transfer time."""

    comm_id: str
    comm_name: str
    coll: str
    msg_size_bytes: int
    transfer_us: float
    ranks: tuple[int, ...] | None = None  # None: every rank of the run


@dataclass(frozen=True)
class Straggler:
    """A rank that arrives `delay_us` late, in the windows listed (None: every window)."""

    rank: int
    delay_us: float
    windows: tuple[int, ...] | None = None


DEFAULT_GROUPS = (
    Group("0xdp01", "DP Group 0", "AllReduce", 64 << 20, 9_000.0),
    Group("0xdp01", "DP Group 0", "AllReduce", 4 << 20, 900.0),
    Group("0xtp02", "TP Group 0", "AllGather", 16 << 20, 2_500.0),
)


@dataclass(frozen=True)
class Run:
    """What to generate."""

    run: str = "synthetic"
    ranks: int = 16
    windows: int = 12
    window_s: int = 30
    per_window: int = 20  # collectives of each group in each window
    groups: tuple[Group, ...] = DEFAULT_GROUPS
    stragglers: tuple[Straggler, ...] = (Straggler(5, 15_000.0),)
    noise_us: float = 400.0  # mean of the exponential arrival noise
    seed: int = 0
    start: datetime | None = None  # None: the last whole hour (recent: the tables have TTLs)

    def t0(self) -> datetime:
        """When the first window starts: a whole hour, so windows of any size dividing an hour
        line up with ClickHouse's toStartOfInterval."""
        hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        return self.start or hour - timedelta(hours=1)

    def pod(self, rank: int) -> str:
        return f"{self.run}-worker-{rank // GPUS_PER_NODE}"

    def node(self, rank: int) -> str:
        return f"gke-a3-node-{rank // GPUS_PER_NODE:04d}"


def samples(spec: Run) -> pa.Table:
    """Every rank's sample of every collective of every group, as one table."""
    rng = np.random.default_rng(spec.seed)
    parts = [_group(spec, group, i, rng) for i, group in enumerate(spec.groups)]
    # One dictionary per column: Arrow's IPC file format, which clickhouse-connect sends, allows
    # no other.
    return pa.concat_tables(parts).unify_dictionaries().combine_chunks()


def _group(spec: Run, group: Group, index: int, rng: np.random.Generator) -> pa.Table:
    ranks = np.array(group.ranks if group.ranks is not None else range(spec.ranks), np.int32)
    ops = spec.windows * spec.per_window
    window = np.repeat(np.arange(spec.windows), spec.per_window)  # the window of each op
    arrival = rng.exponential(spec.noise_us, (ops, ranks.size))
    for straggler in spec.stragglers:
        column = np.flatnonzero(ranks == straggler.rank)
        slow = np.ones(ops, bool) if straggler.windows is None else np.isin(window,
                                                                           straggler.windows)
        arrival[np.ix_(slow, column)] += straggler.delay_us
    jitter = rng.normal(0.0, group.transfer_us * 0.01, (ops, ranks.size))
    exec_us = arrival.max(axis=1, keepdims=True) - arrival + group.transfer_us + np.abs(jitter)
    # Ops spread evenly over each window; groups offset so no two share a timestamp.
    op_in_window = np.tile(np.arange(spec.per_window), spec.windows)
    slot = (op_in_window + (index + 0.5) / len(spec.groups)) / spec.per_window
    offset_us = ((window + slot) * spec.window_s * 1e6).astype(np.int64)
    return _table(spec, group, ranks, offset_us, exec_us)


def _table(spec: Run, group: Group, ranks: np.ndarray, offset_us: np.ndarray,
           exec_us: np.ndarray) -> pa.Table:
    ops, n = exec_us.shape
    rank_col = np.tile(ranks, ops)
    ts = int(spec.t0().timestamp() * 1e6) + np.repeat(offset_us, n)
    algobw = group.msg_size_bytes / exec_us.ravel() / 1e3  # bytes/us -> GB/s
    columns = {
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        **{name: _constant(value, ops * n) for name, value in (
            ("cluster", "usc1-prod"), ("namespace", "team-llm"), ("team", "llm"),
            ("job", spec.run), ("kind", "rayjob"), ("run", spec.run), ("learner", ""),
            ("role", "worker"), ("source", "nccl_inspector"), ("comm_id", group.comm_id),
            ("comm_name", group.comm_name), ("coll", group.coll),
            ("timing_source", "kernel_gpu"), ("algo", ""))},
        "replica_group": pa.array(np.full(ops * n, -1, np.int32)),
        "rank": pa.array(rank_col),
        "pod": per_rank(rank_col, spec.pod, spec.ranks),
        "node": per_rank(rank_col, spec.node, spec.ranks),
        "hostname": per_rank(rank_col, spec.pod, spec.ranks),
        "n_ranks": pa.array(np.full(ops * n, n, np.uint32)),
        "nnodes": pa.array(np.full(ops * n, max(1, n // GPUS_PER_NODE), np.uint32)),
        "coll_sn": pa.array(np.repeat(np.arange(1, ops + 1, dtype=np.uint64), n)),
        "msg_size_bytes": pa.array(np.full(ops * n, group.msg_size_bytes, np.uint64)),
        "exec_time_us": pa.array(exec_us.ravel()),
        "algobw_gbs": pa.array(algobw),
        "busbw_gbs": pa.array(algobw * 2 * (n - 1) / max(n, 1)),
        "pid": pa.array(np.full(ops * n, 4242, np.uint32)),
    }
    return pa.table(columns)


def _constant(value: str, length: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(length, np.int32)), pa.array([value]))


def per_rank(ranks: np.ndarray, name: Any, count: int) -> pa.DictionaryArray:
    """A name per rank as a dictionary of the distinct names (ClickHouse refuses repeats)."""
    distinct, code = np.unique(np.array([name(rank) for rank in range(count)]),
                               return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int32)[ranks]),
                                          pa.array(distinct.tolist()))
