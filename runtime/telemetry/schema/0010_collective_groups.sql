-- Collective samples summed per 30 seconds and collective group, all the group's ranks in one
-- row (issue 27): what the straggler analysis reads (sql/straggler_*.sql) for windows that are
-- multiples of 30 s (the default window, and NCCL Inspector's dump interval in the pods). A
-- fleet's hour of 10,240 ranks in 1,288 small communicators is 7.4 M samples; with one
-- collective a rank and group every 10 s, the per-rank buckets of migration 0003 hold as many
-- rows as there are samples, and grouping them into (window, group) rows took the analysis
-- 3-4 s on two cores. Here a row is one (bucket, group): each communicator rank r's sample
-- count and summed time at index r + 1 of two arrays (-ForEach states, summed element-wise as
-- parts merge and as a query merges the buckets of a window), 154,560 rows for that hour
-- holding 2.5 M ranks' sums. Per 30 s rather than 10 s: reading the states is most of the
-- analysis, and 10 s buckets hold three times as many (windows of other multiples of 10 s
-- read 0003's per-rank buckets).
--
-- Filled from the per-rank buckets as they are written (materialized views cascade: a block
-- inserted into `collectives` fills 0003's buckets, whose block fills these), so it costs an
-- aggregation of the block's buckets, not of its samples. Ranks are those the source wrote:
-- NCCL Inspector's are ranks within the communicator (0 to n_ranks - 1), so the arrays are as
-- long as the communicator. A rank outside [0, 2^20) is left out (the arrays are dense, and
-- NCCL never writes one); the analysis leaves it out on every path (sql/straggler_source.sql),
-- so that all paths give one answer.
--
-- `collectives` stays the source of truth: the analysis reads these rows only when they hold
-- all of a run's samples (straggler_source.sql), else every sample.

CREATE TABLE IF NOT EXISTS collective_group_buckets
(
    bucket         DateTime('UTC'),
    run            LowCardinality(String),
    comm_id        LowCardinality(String),
    coll           LowCardinality(String),
    msg_size_bytes UInt64,
    algo           LowCardinality(String),
    comm_name      SimpleAggregateFunction(any, LowCardinality(String)),
    samples        SimpleAggregateFunction(sum, UInt64),
    sample_counts  AggregateFunction(sumForEach, Array(UInt64)),
    time_sums      AggregateFunction(sumForEach, Array(Float64))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMMDD(bucket)
ORDER BY (run, bucket, comm_id, coll, msg_size_bytes, algo)
TTL bucket + INTERVAL 30 DAY;

-- ClickHouse allows no aggregate inside another: the ranks' sums, then their arrays, then the
-- arrays as states.
CREATE MATERIALIZED VIEW IF NOT EXISTS collective_buckets_to_groups TO collective_group_buckets AS
SELECT
    bucket, run, comm_id, coll, msg_size_bytes, algo, comm_name, samples,
    initializeAggregation('sumForEachState', counts) AS sample_counts,
    initializeAggregation('sumForEachState', sums) AS time_sums
FROM
(
    SELECT
        b AS bucket, run, comm_id, coll, msg_size_bytes, algo, any(name) AS comm_name,
        sum(n) AS samples,
        groupArrayInsertAt(n, toUInt32(rank)) AS counts,
        groupArrayInsertAt(t, toUInt32(rank)) AS sums
    FROM
    (
        -- One row per rank and 30 s: a bucket row is per 10 s, pod and node.
        SELECT toStartOfInterval(bucket, INTERVAL 30 SECOND) AS b, run, comm_id, coll,
               msg_size_bytes, algo, rank, any(comm_name) AS name,
               sum(samples) AS n, sum(exec_time_us_sum) AS t
        FROM collective_buckets
        WHERE rank BETWEEN 0 AND 1048575
        GROUP BY b, run, comm_id, coll, msg_size_bytes, algo, rank
    )
    GROUP BY b, run, comm_id, coll, msg_size_bytes, algo
);

-- Runs already stored, each once (a run with group buckets is skipped, so re-running this file
-- never counts a sample twice).
INSERT INTO collective_group_buckets
SELECT
    bucket, run, comm_id, coll, msg_size_bytes, algo, comm_name, samples,
    initializeAggregation('sumForEachState', counts),
    initializeAggregation('sumForEachState', sums)
FROM
(
    SELECT
        b AS bucket, run, comm_id, coll, msg_size_bytes, algo, any(name) AS comm_name,
        sum(n) AS samples,
        groupArrayInsertAt(n, toUInt32(rank)) AS counts,
        groupArrayInsertAt(t, toUInt32(rank)) AS sums
    FROM
    (
        SELECT toStartOfInterval(bucket, INTERVAL 30 SECOND) AS b, run, comm_id, coll,
               msg_size_bytes, algo, rank, any(comm_name) AS name,
               sum(samples) AS n, sum(exec_time_us_sum) AS t
        FROM collective_buckets
        WHERE rank BETWEEN 0 AND 1048575
            AND run NOT IN (SELECT DISTINCT run FROM collective_group_buckets)
        GROUP BY b, run, comm_id, coll, msg_size_bytes, algo, rank
    )
    GROUP BY b, run, comm_id, coll, msg_size_bytes, algo
);
