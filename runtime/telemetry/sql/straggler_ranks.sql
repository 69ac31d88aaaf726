-- Persistent stragglers (seed §8.3): across the windows of straggler_windows.sql, how often
-- each rank arrived last and by how much, with the pod and node it ran on (its latest, from
-- the run_members rollup of migration 0004).
-- Parameters: as straggler_windows.sql: {run:String}, {window_s:UInt32}, {source:Identifier}.
-- Columns: rank, pod, node, times_last (groups it was last in), groups (groups it was in),
-- share_last, windows_last (windows it was last in, in any group), windows_seen,
-- mean_skew_us and max_skew_us (the skew of the groups it was last in), mean_waiting_us
-- (its own mean waiting over all its groups: small for a straggler).
--
-- As in straggler_windows.sql, a (window, group) row holds its ranks in arrays indexed by
-- rank - lo; each rank's figures are then summed element-wise (-ForEach) over the groups of a
-- window and over the windows, and only the totals are unrolled into a row per rank.
WITH
    (SELECT (min(rank), max(rank) + 1) FROM {source:Identifier} WHERE run = {run:String})
        AS rank_span,
    rank_span.1 AS lo,
    rank_span.2 AS hi,
per_group AS
(
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        sumResample(lo, hi, 1)(exec_time_us_sum, rank) AS time_sums,
        sumResample(lo, hi, 1)(samples, rank) AS sample_counts
    FROM {source:Identifier}
    WHERE run = {run:String}
    GROUP BY window_start, cityHash64(comm_id, coll, msg_size_bytes, algo)
),
groups AS
(
    -- Absent ranks get +inf (never the smallest) and count for nothing below.
    SELECT
        window_start,
        arrayMap(n -> n > 0, sample_counts) AS seen,
        arrayMap((t, n) -> if(n > 0, t / n, inf), time_sums, sample_counts) AS e,
        arrayMin(e) AS transfer_us,
        arrayMax(arrayMap((x, s) -> if(s, x, -inf), e, seen)) - transfer_us AS skew_us,
        indexOf(e, transfer_us) AS last,
        arrayMap(i -> i = last, arrayEnumerate(e)) AS is_last,
        arrayMap(l -> if(l, skew_us, 0), is_last) AS skew_if_last
    FROM per_group
    WHERE arraySum(seen) > 1
),
per_window AS
(
    SELECT
        sumForEach(is_last) AS last_n,
        sumForEach(seen) AS seen_n,
        sumForEach(skew_if_last) AS skew_sum,
        maxForEach(skew_if_last) AS skew_max,
        sumForEach(arrayMap((x, s) -> if(s, x - transfer_us, 0), e, seen)) AS wait_sum
    FROM groups
    GROUP BY window_start
),
totals AS
(
    SELECT
        sumForEach(last_n) AS times_last, sumForEach(seen_n) AS groups,
        sumForEach(arrayMap(n -> n > 0, last_n)) AS windows_last,
        sumForEach(arrayMap(n -> n > 0, seen_n)) AS windows_seen,
        sumForEach(skew_sum) AS skew_sum, maxForEach(skew_max) AS max_skew_us,
        sumForEach(wait_sum) AS wait_sum
    FROM per_window
),
per_rank AS
(
    SELECT toInt32(lo + i - 1) AS rank, times_last, groups, windows_last, windows_seen,
           skew_sum, max_skew_us, wait_sum
    FROM totals
    ARRAY JOIN arrayEnumerate(groups) AS i, times_last, groups, windows_last, windows_seen,
               skew_sum, max_skew_us, wait_sum
    WHERE groups > 0
),
placement AS
(
    SELECT rank, argMax(pod, last_ts) AS pod, argMax(node, last_ts) AS node
    FROM run_members
    WHERE run = {run:String} AND source_table = 'collectives'
    GROUP BY rank
)
SELECT
    r.rank AS rank, p.pod AS pod, p.node AS node,
    r.times_last AS times_last,
    r.groups AS groups,
    times_last / groups AS share_last,
    r.windows_last AS windows_last,
    r.windows_seen AS windows_seen,
    if(times_last > 0, r.skew_sum / times_last, 0) AS mean_skew_us,
    r.max_skew_us AS max_skew_us,
    r.wait_sum / groups AS mean_waiting_us
FROM per_rank AS r
LEFT JOIN placement AS p ON p.rank = r.rank
ORDER BY times_last DESC, mean_skew_us DESC, rank
