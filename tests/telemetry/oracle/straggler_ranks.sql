-- Persistent stragglers (seed §8.3): across the windows of straggler_windows.sql, how often
-- each rank arrived last and by how much, with the pod and node it ran on (its latest).
-- Parameters: as straggler_windows.sql: {run:String}, {window_s:UInt32}, {source:Identifier}.
-- Columns: rank (global, as in straggler_windows.sql), pod, node, times_last (groups it was
-- last in), groups (groups it was in), share_last, windows_last (windows it was last in, in
-- any group), windows_seen (windows it took part in, counted in the communicator it took
-- part in most), mean_skew_us and max_skew_us (the skew of the groups it was last in),
-- mean_waiting_us (its own mean waiting over all its groups: small for a straggler).
--
-- The steps up to `communicators` are straggler_windows.sql's (see there), but for the
-- group's names, of which only the communicator is kept. A (window, group) row holds its
-- ranks in arrays indexed by their rank in the communicator, so the arrays of one
-- communicator line up: each rank's figures are summed element-wise (-ForEach) over the
-- groups of a window and over the windows, per communicator; only these totals are unrolled
-- into rows, one per rank and communicator, and summed per global rank.
WITH
    64 AS small,
    (SELECT (min(rank), max(rank) + 1) FROM {source:Identifier} WHERE run = {run:String})
        AS rank_span,
    rank_span.1 AS lo,
    rank_span.2 AS hi,
small_comms AS
(
    -- Tensor- or pipeline-parallel communicators, say (ranks below their size).
    SELECT comm_id, max(n_ranks) AS size
    FROM comm_members
    WHERE run = {run:String}
    GROUP BY comm_id
    HAVING size BETWEEN 1 AND small AND max(rank) < size
),
    (SELECT max(size) FROM small_comms) AS small_hi,
per_group AS
(
    -- Per (window, group): each rank's sums at index rank - first + 1.
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        cityHash64(comm_id, coll, msg_size_bytes, algo) AS group_key,
        any(comm_id) AS comm,
        toInt32(0) AS first,
        sumResample(0, small_hi, 1)(exec_time_us_sum, rank) AS time_sums,
        sumResample(0, small_hi, 1)(samples, rank) AS sample_counts
    FROM {source:Identifier}
    WHERE run = {run:String} AND small_hi > 0
        AND comm_id IN (SELECT comm_id FROM small_comms)
    GROUP BY window_start, group_key
    UNION ALL
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        cityHash64(comm_id, coll, msg_size_bytes, algo) AS group_key,
        any(comm_id) AS comm,
        toInt32(ifNull(lo, 0)) AS first,
        sumResample(lo, hi, 1)(exec_time_us_sum, rank) AS time_sums,
        sumResample(lo, hi, 1)(samples, rank) AS sample_counts
    FROM {source:Identifier}
    WHERE run = {run:String} AND comm_id NOT IN (SELECT comm_id FROM small_comms)
    GROUP BY window_start, group_key
),
processes AS
(
    SELECT hostname, pid, argMax(rank, ts) AS rank, 1 AS announced
    FROM rank_processes
    WHERE run = {run:String}
    GROUP BY hostname, pid
),
member_ranks AS
(
    -- Each communicator rank's global rank and where it ran.
    SELECT m.comm_id AS comm_id, m.rank AS comm_rank,
           if(p.announced, p.rank, m.rank) AS rank, m.pod AS pod, m.node AS node,
           m.last_ts AS last_ts
    FROM comm_members AS m
    LEFT JOIN processes AS p ON p.hostname = m.hostname AND p.pid = m.pid
    WHERE m.run = {run:String} AND m.rank >= 0
),
communicators AS
(
    -- The global rank of communicator rank r at index r + 1 (-1: none recorded).
    SELECT comm_id, groupArrayInsertAt(toInt32(-1))(rank, toUInt32(comm_rank)) AS global_ranks
    FROM member_ranks
    GROUP BY comm_id
),
groups AS
(
    -- Absent ranks get +inf (never the smallest) and count for nothing below.
    SELECT
        window_start, comm AS comm_id, first,
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
        comm_id, window_start, any(first) AS first,
        sumForEach(is_last) AS last_n,
        sumForEach(seen) AS seen_n,
        sumForEach(skew_if_last) AS skew_sum,
        maxForEach(skew_if_last) AS skew_max,
        sumForEach(arrayMap((x, s) -> if(s, x - transfer_us, 0), e, seen)) AS wait_sum,
        groupUniqArray(last) AS lasts
    FROM groups
    GROUP BY comm_id, window_start
),
per_comm AS
(
    SELECT
        comm_id, any(first) AS first,
        sumForEach(last_n) AS comm_times_last, sumForEach(seen_n) AS comm_groups,
        sumForEach(arrayMap(n -> n > 0, seen_n)) AS comm_windows_seen,
        sumForEach(skew_sum) AS comm_skew_sum, maxForEach(skew_max) AS comm_max_skew,
        sumForEach(wait_sum) AS comm_wait_sum,
        -- (index of a last arriver, window): for the windows a rank was last in in any of
        -- its communicators.
        arrayFlatten(groupArray(arrayMap(l -> (l, window_start), lasts))) AS last_in
    FROM per_window
    GROUP BY comm_id
),
comm_ranks AS
(
    -- The global ranks lined up with per_comm's arrays.
    SELECT
        p.*,
        arrayMap((g, i) -> if(g >= 0, g, toInt32(first + i - 1)),
                 arraySlice(arrayResize(c.global_ranks, first + length(comm_groups),
                                        toInt32(-1)), first + 1, length(comm_groups))
                     AS recorded,
                 arrayEnumerate(recorded)) AS global
    FROM per_comm AS p
    LEFT JOIN communicators AS c ON c.comm_id = p.comm_id
),
per_rank AS
(
    SELECT
        rank, sum(comm_times_last) AS times_last, sum(comm_groups) AS groups,
        length(groupUniqArrayArray(arrayMap(l -> l.2, arrayFilter(l -> l.1 = i, last_in))))
            AS windows_last,
        max(comm_windows_seen) AS windows_seen, sum(comm_skew_sum) AS skew_sum,
        max(comm_max_skew) AS max_skew_us, sum(comm_wait_sum) AS wait_sum
    FROM comm_ranks
    ARRAY JOIN global AS rank, arrayEnumerate(global) AS i, comm_times_last, comm_groups,
               comm_windows_seen, comm_skew_sum, comm_max_skew, comm_wait_sum
    WHERE comm_groups > 0
    GROUP BY rank
),
placement AS
(
    SELECT rank, argMax(pod, last_ts) AS pod, argMax(node, last_ts) AS node
    FROM member_ranks
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
