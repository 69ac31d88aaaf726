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

from collections.abc import Iterator
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


# --- a fleet's job, as NCCL Inspector reports it --------------------------------------------

@dataclass(frozen=True)
class FleetJob:
    """One job over `nodes` nodes of GPUS_PER_NODE ranks, as NCCL Inspector reports it: a
    tensor-parallel communicator per node (its 8 ranks) and a data-parallel one per local rank
    (one rank of every node), so 10,240 ranks make 1,288 communicators. Each step (every
    `step_s`) runs one AllGather in every tensor-parallel communicator and one AllReduce in
    every data-parallel one. A sample's `rank` is the rank within its communicator; each
    training rank's process is (its pod's name, pid 1000 + local rank), announced under its
    global rank in `rank_processes` (`processes`), as the runtime announces it."""

    run: str = "fleet"
    nodes: int = 4
    windows: int = 4
    window_s: int = 30
    step_s: int = 10
    stragglers: tuple[Straggler, ...] = ()  # global ranks; windows counted from 0
    noise_us: float = 400.0
    seed: int = 0
    start: datetime | None = None  # None: Run's (the last whole hour, an hour ago)

    @property
    def ranks(self) -> int:
        return self.nodes * GPUS_PER_NODE

    @property
    def communicators(self) -> int:
        return self.nodes + GPUS_PER_NODE

    def t0(self) -> datetime:
        return self.start or Run().t0()

    def pod(self, rank: int) -> str:
        return f"{self.run}-worker-{rank // GPUS_PER_NODE}"

    def node(self, rank: int) -> str:
        return f"gke-a3-node-{rank // GPUS_PER_NODE:04d}"

    def processes(self) -> list[dict[str, Any]]:
        """Every rank's announcement: its identity, host name and pid."""
        return [{"ts": self.t0(), "cluster": "usc1-prod", "namespace": "team-llm", "team": "llm",
                 "job": self.run, "kind": "rayjob", "run": self.run, "learner": "",
                 "replica_group": -1, "rank": rank, "role": "worker", "pod": self.pod(rank),
                 "node": self.node(rank), "hostname": self.pod(rank),
                 "pid": 1000 + rank % GPUS_PER_NODE} for rank in range(self.ranks)]


TP_GROUP = Group("", "TP", "AllGather", 16 << 20, 2_500.0)  # per node
DP_GROUP = Group("", "DP", "AllReduce", 64 << 20, 9_000.0)  # per local rank


def fleet_samples(job: FleetJob, windows_at_once: int = 4) -> Iterator[pa.Table]:
    """The job's samples, `windows_at_once` windows a table (bounded memory at 10,000 ranks):
    the arrival model of `samples`, per communicator and step."""
    rng = np.random.default_rng(job.seed)
    names = _FleetNames(job)
    steps = job.window_s // job.step_s
    for first in range(0, job.windows, windows_at_once):
        windows = range(first, min(first + windows_at_once, job.windows))
        ops = np.repeat(np.array(windows), steps) * steps + np.tile(np.arange(steps),
                                                                     len(windows))
        yield pa.concat_tables([
            _fleet_group(job, names, rng, ops, group, tensor)
            for tensor, group in ((True, TP_GROUP), (False, DP_GROUP))]).unify_dictionaries(
        ).combine_chunks()


class _FleetNames:
    """Per global rank: its pod (also its host name) and node, as dictionary codes."""

    def __init__(self, job: FleetJob) -> None:
        nodes = np.arange(job.nodes)
        self.pods = pa.array([f"{job.run}-worker-{n}" for n in nodes])
        self.nodes = pa.array([f"gke-a3-node-{n:04d}" for n in nodes])
        self.tp = pa.array([f"0xtp{n:05x}" for n in nodes])
        self.dp = pa.array([f"0xdp{local:05x}" for local in range(GPUS_PER_NODE)])


def _fleet_group(job: FleetJob, names: _FleetNames, rng: np.random.Generator, ops: np.ndarray,
                 group: Group, tensor: bool) -> pa.Table:
    """One kind of collective over all its communicators: samples of shape (op, node, local
    rank), the communicators a node's 8 ranks (tensor) or every node's rank `local`."""
    shape = (ops.size, job.nodes, GPUS_PER_NODE)
    exec_us = _fleet_exec_us(job, rng, ops, group, tensor)
    _, node, local = (np.broadcast_to(a, shape).ravel() for a in np.ix_(
        np.arange(ops.size), np.arange(job.nodes), np.arange(GPUS_PER_NODE)))
    size = exec_us.size
    offset = (ops + (0.25 if tensor else 0.75)) * job.step_s * 1e6
    ts = int(job.t0().timestamp() * 1e6) + np.repeat(offset.astype(np.int64), size // ops.size)
    n_ranks = GPUS_PER_NODE if tensor else job.nodes
    comm = pa.DictionaryArray.from_arrays(pa.array((node if tensor else local).astype(np.int32)),
                                          names.tp if tensor else names.dp)
    comm_names = pa.DictionaryArray.from_arrays(comm.indices, pa.array(
        [f"{group.comm_name} {i}" for i in range(len(comm.dictionary))]))
    algobw = group.msg_size_bytes / exec_us / 1e3
    codes = pa.array(node.astype(np.int32))
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        **{name: _constant(value, size) for name, value in (
            ("cluster", "usc1-prod"), ("namespace", "team-llm"), ("team", "llm"),
            ("job", job.run), ("kind", "rayjob"), ("run", job.run), ("learner", ""),
            ("role", "worker"), ("source", "nccl_inspector"), ("coll", group.coll),
            ("timing_source", "kernel_gpu"), ("algo", ""))},
        "comm_id": comm, "comm_name": comm_names,
        "replica_group": pa.array(np.full(size, -1, np.int32)),
        "rank": pa.array((local if tensor else node).astype(np.int32)),  # in the communicator
        "pod": pa.DictionaryArray.from_arrays(codes, names.pods),
        "node": pa.DictionaryArray.from_arrays(codes, names.nodes),
        "hostname": pa.DictionaryArray.from_arrays(codes, names.pods),
        "n_ranks": pa.array(np.full(size, n_ranks, np.uint32)),
        "nnodes": pa.array(np.full(size, 1 if tensor else job.nodes, np.uint32)),
        "coll_sn": pa.array(np.repeat(ops + 1, size // ops.size).astype(np.uint64)),
        "msg_size_bytes": pa.array(np.full(size, group.msg_size_bytes, np.uint64)),
        "exec_time_us": pa.array(exec_us),
        "algobw_gbs": pa.array(algobw),
        "busbw_gbs": pa.array(algobw * 2 * (n_ranks - 1) / n_ranks),
        "pid": pa.array((1000 + local).astype(np.uint32)),
    })


def _fleet_exec_us(job: FleetJob, rng: np.random.Generator, ops: np.ndarray, group: Group,
                   tensor: bool) -> np.ndarray:
    """Each sample's time, (op, node, local rank) flattened: the wait for the communicator's
    last arrival, plus the transfer."""
    shape = (ops.size, job.nodes, GPUS_PER_NODE)
    arrival = rng.exponential(job.noise_us, shape)
    window = ops // (job.window_s // job.step_s)
    for straggler in job.stragglers:
        slow = np.ones(ops.size, bool) if straggler.windows is None else np.isin(
            window, straggler.windows)
        node, local = divmod(straggler.rank, GPUS_PER_NODE)
        arrival[slow, node, local] += straggler.delay_us
    last = arrival.max(axis=2 if tensor else 1, keepdims=True)
    jitter = np.abs(rng.normal(0.0, group.transfer_us * 0.01, shape))
    return np.asarray((last - arrival + group.transfer_us + jitter).ravel())
