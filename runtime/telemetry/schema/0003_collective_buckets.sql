-- Collective samples summed per 10 seconds, group and rank, so that the straggler analysis and
-- gkr-ui read one row per rank per group per 10 s instead of every sample (benchmarks/
-- telemetry.py: 10 M samples of 10,000 ranks; the analysis grouped them by six keys, two
-- passes, over a second on two cores). A window that is a multiple of 10 s is a sum of whole
-- buckets: toStartOfInterval aligns both to the epoch.
--
-- `collectives` stays the source of truth. A run's buckets are used only when they hold
-- all its samples (runtime/telemetry/stragglers.py compares the counts): rows written before
-- this migration, a backfill cut short, or a window that is not a multiple of 10 s fall back
-- to the samples themselves.
-- Derived rows: they keep (run, rank, pod, node) to join on, not the whole identity.

CREATE TABLE IF NOT EXISTS collective_buckets
(
    bucket           DateTime('UTC'),
    run              LowCardinality(String),
    comm_id          LowCardinality(String),
    coll             LowCardinality(String),
    msg_size_bytes   UInt64,
    algo             LowCardinality(String),
    rank             Int32,
    pod              LowCardinality(String),
    node             LowCardinality(String),
    comm_name        LowCardinality(String),
    samples          UInt64,
    exec_time_us_sum Float64
)
ENGINE = SummingMergeTree((samples, exec_time_us_sum))
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (run, comm_id, coll, msg_size_bytes, algo, bucket, rank, pod, node)
TTL bucket + INTERVAL 30 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS collectives_to_buckets TO collective_buckets AS
SELECT
    toStartOfInterval(ts, INTERVAL 10 SECOND) AS bucket,
    run, comm_id, coll, msg_size_bytes, algo, rank, pod, node,
    any(comm_name) AS comm_name,
    count() AS samples,
    sum(exec_time_us) AS exec_time_us_sum
FROM collectives
GROUP BY bucket, run, comm_id, coll, msg_size_bytes, algo, rank, pod, node;

-- The samples as buckets of one sample each: what the analysis reads when a run's buckets are
-- incomplete (same columns, so one query serves both).
CREATE VIEW IF NOT EXISTS collective_samples AS
SELECT
    ts AS bucket, run, comm_id, coll, msg_size_bytes, algo, rank, pod, node, comm_name,
    toUInt64(1) AS samples, exec_time_us AS exec_time_us_sum
FROM collectives;

-- Runs already stored: each run once (a run with buckets is skipped, so re-running this file
-- never counts a sample twice; a run cut short here stays incomplete and is read raw).
INSERT INTO collective_buckets
SELECT
    toStartOfInterval(ts, INTERVAL 10 SECOND) AS bucket,
    run, comm_id, coll, msg_size_bytes, algo, rank, pod, node,
    any(comm_name) AS comm_name,
    count() AS samples,
    sum(exec_time_us) AS exec_time_us_sum
FROM collectives
WHERE run NOT IN (SELECT DISTINCT run FROM collective_buckets)
GROUP BY bucket, run, comm_id, coll, msg_size_bytes, algo, rank, pod, node;
