-- The sample ledger (issue 24): one row per rank per committed optimizer step, naming the
-- global sample indices the rank trained (runtime/telemetry/ledger.py writes them as JSON
-- lines, one file per rank incarnation; runtime/telemetry/ledger_verdict.py judges them).
-- A line's keys are the raw table's columns below: a local load inserts the files as they
-- are (`INSERT INTO sample_ledger_raw FORMAT JSONEachRow`, runtime/telemetry/ledger_store.py)
-- and Fluent Bit posts the same lines from the nodes with the pod's identity added as
-- top-level keys (`cluster`, `namespace`, `team`, `job`, `node`); the view completes the
-- identity from the line (run, replica group) and types it.

CREATE TABLE IF NOT EXISTS sample_ledger
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
    run_id        LowCardinality(String),
    started       UInt64,
    origin        LowCardinality(String),
    resumed_from  UInt64,
    step          UInt64,
    group         Int32,
    pid           UInt32,
    at            Float64,
    slot          UInt32,
    slots         UInt32,
    epoch_size    UInt64,
    starts        Array(UInt64),
    count         UInt64,
    batch_starts  Array(UInt64),
    batch_count   UInt64
)
ENGINE = MergeTree
ORDER BY (run_id, step, group, slot)
TTL toDateTime(ts) + INTERVAL 365 DAY;

-- What arrives: the ledger line's keys plus the identity Fluent Bit adds; keeps nothing.
CREATE TABLE IF NOT EXISTS sample_ledger_raw
(
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
    run_id        LowCardinality(String),
    started       UInt64,
    origin        LowCardinality(String),
    resumed_from  UInt64,
    step          UInt64,
    group         Int32,
    pid           UInt32,
    at            Float64,
    slot          UInt32,
    slots         UInt32,
    epoch_size    UInt64,
    starts        Array(UInt64),
    count         UInt64,
    batch_starts  Array(UInt64),
    batch_count   UInt64
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS sample_ledger_raw_to_ledger TO sample_ledger AS
SELECT
    fromUnixTimestamp64Micro(toInt64(at * 1000000), 'UTC') AS ts,
    cluster, namespace, team, job, kind,
    CAST(if(run = '', run_id, run) AS LowCardinality(String)) AS run,
    learner,
    group AS replica_group,
    rank,
    CAST(if(role = '', 'worker', role) AS LowCardinality(String)) AS role,
    pod, node, run_id, started, origin, resumed_from, step, group, pid, at, slot, slots,
    epoch_size, starts, count, batch_starts, batch_count
FROM sample_ledger_raw;

-- A ledger file's partial last line (a rank killed in the middle of its write), skipped by
-- the load and named in the verdict; one row per file, a reload replaces it.
CREATE TABLE IF NOT EXISTS sample_ledger_skipped
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
    run_id        LowCardinality(String),
    file          String,
    line          UInt64,
    bytes         UInt64
)
ENGINE = ReplacingMergeTree
ORDER BY (run_id, file)
TTL toDateTime(ts) + INTERVAL 365 DAY;
