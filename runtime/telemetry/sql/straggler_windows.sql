-- Per window, per collective group: the last arriver, the skew, and each rank's waiting
-- (seed §8.3). A group is (communicator, collective, message size, algorithm where the source
-- gives one). e_i is rank i's mean duration of the group's collectives in the window: a rank
-- that arrives early waits inside the collective for the last one, so the rank with the
-- smallest e_i is the last arriver (the lowest rank on a tie), min(e_i) estimates the transfer
-- itself, and e_i - min is rank i's waiting time. A group seen from one rank only has no skew
-- and is left out.
-- Parameters: {run:String}, {window_s:UInt32}, {source:Identifier}: collective_buckets (the
-- samples summed per 10 s: for windows that are multiples of 10 s, once a run's buckets hold
-- all its samples; see straggler_source.sql) or collective_samples (every sample).
-- Columns: window_start, comm_id, comm_name, coll, msg_size_bytes, algo, ranks, last_rank,
-- transfer_us, skew_us, wait_p50_us (the median rank's waiting), waiting_us
-- (Array(Tuple(rank, waiting)) in rank order; leave the column out when not needed, e.g.
-- `SELECT * EXCEPT (waiting_us) FROM (…)`, and it is never computed: at 10,000 ranks it is
-- most of the time).
--
-- How, for speed (benchmarks/fleet/stragglers.py: 10,000 ranks, an hour of 30 s windows):
-- each (window, group) is one row holding every rank's sums in arrays indexed by rank - lo
-- (-Resample), not a hash table of window x group x rank; the group is grouped on by a hash
-- of its four columns, which ClickHouse aggregates several times faster than the columns.
WITH
    (SELECT (min(rank), max(rank) + 1) FROM {source:Identifier} WHERE run = {run:String})
        AS rank_span,
    rank_span.1 AS lo,
    rank_span.2 AS hi,
per_group AS
(
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        cityHash64(comm_id, coll, msg_size_bytes, algo) AS group_key,
        any((comm_id, comm_name, coll, msg_size_bytes, algo)) AS names,
        sumResample(lo, hi, 1)(exec_time_us_sum, rank) AS time_sums,
        sumResample(lo, hi, 1)(samples, rank) AS sample_counts
    FROM {source:Identifier}
    WHERE run = {run:String}
    GROUP BY window_start, group_key
),
groups AS
(
    SELECT
        window_start, names.1 AS comm_id, names.2 AS comm_name, names.3 AS coll,
        names.4 AS msg_size_bytes, names.5 AS algo,
        arrayFilter((i, n) -> n > 0, arrayEnumerate(sample_counts), sample_counts) AS present,
        arrayFilter((x, n) -> n > 0, arrayMap((t, n) -> t / n, time_sums, sample_counts),
                    sample_counts) AS e,
        length(present) AS ranks
    FROM per_group
    WHERE ranks > 1
)
SELECT
    window_start, comm_id, comm_name, coll, msg_size_bytes, algo, ranks,
    toInt32(lo + present[indexOf(e, arrayMin(e))] - 1) AS last_rank,
    arrayMin(e) AS transfer_us,
    arrayMax(e) - transfer_us AS skew_us,
    arrayReduce('quantileExact(0.5)', e) - transfer_us AS wait_p50_us,
    arrayMap((i, x) -> (toInt32(lo + i - 1), x - transfer_us), present, e) AS waiting_us
FROM groups
ORDER BY window_start, comm_id, coll, msg_size_bytes, algo
