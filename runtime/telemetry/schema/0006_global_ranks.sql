-- Global ranks for NCCL Inspector records. The Inspector's `rank` is a process's rank within
-- one communicator (reference/telemetry.md §1), so with tensor-parallel communicators of 8,
-- rank 3 of every one of them is a different process. Its records carry the writing process's
-- `hostname` and `pid` (gethostname() and getpid(), NVIDIA/nccl inspector.cc), and each training
-- rank says which process it is (runtime/train/telemetry.py), so the analysis maps
-- (communicator, communicator rank) -> (hostname, pid) -> global rank when it reads, in whatever
-- order the rows arrived (sql/straggler_*.sql). `collectives.rank` stays what the source wrote.

-- One row per training rank's process: its global rank (the identity's `rank`) and the host
-- name and process id its NCCL Inspector records carry.
CREATE TABLE IF NOT EXISTS rank_processes
(
    ts            DateTime64(6, 'UTC'),
    cluster       LowCardinality(String),
    namespace     LowCardinality(String),
    team          LowCardinality(String),
    job           LowCardinality(String),
    kind          LowCardinality(String),
    run           LowCardinality(String),
    learner       LowCardinality(String),
    replica_group Int32,
    rank          Int32,
    role          LowCardinality(String),
    pod           LowCardinality(String),
    node          LowCardinality(String),
    hostname      LowCardinality(String),
    pid           UInt32
)
ENGINE = MergeTree
ORDER BY (run, hostname, pid)
TTL toDateTime(ts) + INTERVAL 365 DAY;

-- Who each communicator's ranks were: one row per (run, communicator, rank as the source wrote
-- it, process, pod, node), with the communicator's size, filled on insert; a run's few
-- thousand rows, not its samples.
CREATE TABLE IF NOT EXISTS comm_members
(
    run      LowCardinality(String),
    comm_id  LowCardinality(String),
    rank     Int32,
    hostname LowCardinality(String),
    pid      UInt32,
    pod      LowCardinality(String),
    node     LowCardinality(String),
    n_ranks  SimpleAggregateFunction(max, UInt32),
    last_ts  SimpleAggregateFunction(max, DateTime64(6, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (run, comm_id, rank, hostname, pid, pod, node)
TTL toDateTime(last_ts) + INTERVAL 365 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS collectives_to_comm_members TO comm_members AS
SELECT run, comm_id, rank, hostname, pid, pod, node, max(n_ranks) AS n_ranks,
       max(ts) AS last_ts
FROM collectives
GROUP BY run, comm_id, rank, hostname, pid, pod, node;

-- The rows stored before this migration, a run at a time (a re-run skips the runs done).
INSERT INTO comm_members
SELECT run, comm_id, rank, hostname, pid, pod, node, max(n_ranks), max(ts)
FROM collectives
WHERE run NOT IN (SELECT DISTINCT run FROM comm_members)
GROUP BY run, comm_id, rank, hostname, pid, pod, node;
