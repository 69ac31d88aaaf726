-- The telemetry tables (seed §8). Every table starts with the identity columns of
-- runtime.identity.Identity, so any metric joins any other on (run, rank), (pod) or (node).
-- Applied in file order by runtime.telemetry.store.Store.migrate; every statement is
-- idempotent, so re-running a file that half-applied is safe.

CREATE TABLE IF NOT EXISTS train_steps
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
    step          UInt64,
    loss          Float64,
    step_time_s   Float64,
    samples_per_s Float64,
    tokens_per_s  Float64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (run, rank, step)
TTL toDateTime(ts) + INTERVAL 180 DAY;

-- FleetMonitor summaries (seed §8.2): one row per service per report.
CREATE TABLE IF NOT EXISTS fleet_summaries
(
    ts               DateTime64(6, 'UTC'),
    cluster          LowCardinality(String),
    namespace        LowCardinality(String),
    team             LowCardinality(String),
    job              LowCardinality(String),
    kind             LowCardinality(String),
    run              LowCardinality(String),
    learner          LowCardinality(String),
    replica_group    Int32,
    rank             Int32,
    role             LowCardinality(String),
    pod              LowCardinality(String),
    node             LowCardinality(String),
    step             UInt64,
    service          LowCardinality(String),
    throughput_rps   Float64,
    queue_wait_ms_p50 Nullable(Float64),
    queue_wait_ms_p99 Nullable(Float64),
    process_ms_p50   Nullable(Float64),
    process_ms_p99   Nullable(Float64),
    transfer_ms_p50  Nullable(Float64),
    transfer_ms_p99  Nullable(Float64),
    pending          UInt32,
    workers_healthy  UInt32,
    workers_known    UInt32,
    restarts         UInt32,
    errors           UInt32
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (run, service, ts)
TTL toDateTime(ts) + INTERVAL 180 DAY;

-- One collective on one rank (seed §8.3). `source` says who measured it: 'nccl_inspector'
-- (the NCCL profiler plugin's JSON records) or 'gloo_timer' (the runtime timing its own
-- collectives on CPU, in the same shape). `algo` is empty where the source gives none (the
-- inspector's JSON has no algorithm; its Prometheus output does).
CREATE TABLE IF NOT EXISTS collectives
(
    ts             DateTime64(6, 'UTC'),
    cluster        LowCardinality(String),
    namespace      LowCardinality(String),
    team           LowCardinality(String),
    job            LowCardinality(String),
    kind           LowCardinality(String),
    run            LowCardinality(String),
    learner        LowCardinality(String),
    replica_group  Int32,
    rank           Int32,
    role           LowCardinality(String),
    pod            LowCardinality(String),
    node           LowCardinality(String),
    source         LowCardinality(String),
    comm_id        LowCardinality(String),
    comm_name      LowCardinality(String),
    n_ranks        UInt32,
    nnodes         UInt32,
    coll           LowCardinality(String),
    coll_sn        UInt64,
    msg_size_bytes UInt64,
    exec_time_us   Float64,
    timing_source  LowCardinality(String),
    algo           LowCardinality(String),
    algobw_gbs     Nullable(Float64),
    busbw_gbs      Nullable(Float64),
    hostname       LowCardinality(String),
    pid            UInt32
)
ENGINE = MergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (run, comm_id, coll, msg_size_bytes, ts, rank)
TTL toDateTime(ts) + INTERVAL 30 DAY;

-- PyTorch Flight Recorder entries, one row per entry per rank (reference/telemetry.md §2).
CREATE TABLE IF NOT EXISTS flight_recorder
(
    ts                DateTime64(6, 'UTC'),
    cluster           LowCardinality(String),
    namespace         LowCardinality(String),
    team              LowCardinality(String),
    job               LowCardinality(String),
    kind              LowCardinality(String),
    run               LowCardinality(String),
    learner           LowCardinality(String),
    replica_group     Int32,
    rank              Int32,
    role              LowCardinality(String),
    pod               LowCardinality(String),
    node              LowCardinality(String),
    pg_id             LowCardinality(String),
    pg_name           LowCardinality(String),
    pg_desc           LowCardinality(String),
    record_id         UInt64,
    collective_seq_id UInt64,
    p2p_seq_id        UInt64,
    op_id             UInt64,
    profiling_name    LowCardinality(String),
    is_p2p            Bool,
    state             LowCardinality(String),
    retired           Bool,
    time_created_ns   UInt64,
    time_started_ns   UInt64,
    time_completed_ns UInt64,
    duration_ms       Nullable(Float64),
    timeout_ms        UInt64,
    input_sizes       String,
    input_dtypes      Array(LowCardinality(String)),
    output_sizes      String,
    output_dtypes     Array(LowCardinality(String)),
    last_enqueued     Int64,
    last_started      Int64,
    last_completed    Int64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (run, pg_id, collective_seq_id, rank)
TTL toDateTime(ts) + INTERVAL 90 DAY;

-- What happened to pods, nodes and runs: Kubernetes events, Warden's actions (cordon,
-- reboot, uncordon, escalation), the runtime's own notices (dropped telemetry, a failure).
CREATE TABLE IF NOT EXISTS events
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
    source        LowCardinality(String),
    object_kind   LowCardinality(String),
    object_name   String,
    reason        LowCardinality(String),
    severity      LowCardinality(String),
    message       String,
    count         UInt64
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (cluster, node, ts)
TTL toDateTime(ts) + INTERVAL 365 DAY;
