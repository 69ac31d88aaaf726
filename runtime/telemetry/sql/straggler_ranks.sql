-- Persistent stragglers (seed §8.3): across the windows of straggler_windows.sql, how often
-- each rank arrived last and by how much, with the pod and node it ran on (its latest).
-- Parameters: as straggler_windows.sql: {run:String}, {window_s:UInt32}, {source:String},
-- {rows:Identifier} (not groups_per_window: every group counts).
-- Columns: rank (global, as in straggler_windows.sql), pod, node, times_last (groups it was
-- last in), groups (groups it was in), share_last, windows_last (windows it was last in, in
-- any group), windows_seen (windows it took part in, counted in the communicator it took
-- part in most), mean_skew_us and max_skew_us (the skew of the groups it was last in),
-- mean_waiting_us (its own mean waiting over all its groups: small for a straggler).
--
-- The steps up to `groups` are straggler_windows.sql's (see there). A (window, group) row
-- holds its ranks in arrays indexed by their rank in the communicator, so the arrays of one
-- communicator line up: each rank's groups, windows and waiting are aggregated element-wise
-- (-ForEach) over the communicator's groups, and each group's last arriver is kept with its
-- window and skew; only these are unrolled into rows, one per rank and communicator and one
-- per group, and summed per global rank.
WITH
per_group AS
(
    -- Per (window, group): rank r's sample count and summed time at index r + 1. A window of
    -- 30 s is one bucket (schema/0010): FINAL merges a bucket's rows as the table's merges
    -- would, where they have not yet, and is cheaper than merging states per group.
    SELECT
        bucket AS window_start, comm_id, coll, msg_size_bytes, algo, comm_name,
        finalizeAggregation(sample_counts) AS counts,
        finalizeAggregation(time_sums) AS sums
    FROM collective_group_buckets FINAL
    WHERE run = {run:String} AND {source:String} = 'collective_group_buckets'
        AND {window_s:UInt32} = 30
    UNION ALL
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        comm_id, coll, msg_size_bytes, algo, any(comm_name) AS comm_name,
        sumForEachMerge(sample_counts) AS counts,
        sumForEachMerge(time_sums) AS sums
    FROM collective_group_buckets
    WHERE run = {run:String} AND {source:String} = 'collective_group_buckets'
        AND {window_s:UInt32} != 30
    GROUP BY window_start, comm_id, coll, msg_size_bytes, algo
    UNION ALL
    SELECT
        window_start, comm_id, coll, msg_size_bytes, algo, any(name) AS comm_name,
        groupArrayInsertAt(n, toUInt32(rank)) AS counts,
        groupArrayInsertAt(t, toUInt32(rank)) AS sums
    FROM
    (
        SELECT
            toStartOfInterval(toDateTime(bucket), toIntervalSecond({window_s:UInt32}))
                AS window_start,
            comm_id, coll, msg_size_bytes, algo, rank, any(comm_name) AS name,
            sum(samples) AS n, sum(exec_time_us_sum) AS t
        FROM {rows:Identifier}
        WHERE run = {run:String} AND {source:String} != 'collective_group_buckets'
            AND rank BETWEEN 0 AND 1048575
        GROUP BY window_start, comm_id, coll, msg_size_bytes, algo, rank
    )
    GROUP BY window_start, comm_id, coll, msg_size_bytes, algo
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
    WHERE m.run = {run:String} AND m.rank BETWEEN 0 AND 1048575
),
communicators AS
(
    -- Each communicator rank's global rank, lined up with per_group's arrays: the global rank
    -- of communicator rank r at index r + 1, r where none was recorded.
    SELECT comm_id, groupArrayInsertAt(toInt32(-1))(rank, toUInt32(comm_rank)) AS recorded
    FROM member_ranks
    GROUP BY comm_id
),
groups AS
(
    -- Absent ranks get +inf (never the smallest) and count for nothing below.
    SELECT
        window_start, comm_id,
        arrayMap(n -> n > 0, counts) AS seen,
        arrayMap((t, n) -> if(n > 0, t / n, inf), sums, counts) AS e,
        arrayMin(e) AS transfer_us,
        arrayMax(arrayMap((x, s) -> if(s, x, -inf), e, seen)) - transfer_us AS skew_us,
        indexOf(e, transfer_us) AS last,
        arrayMap(i -> i = last, arrayEnumerate(e)) AS is_last,
        arrayMap(l -> if(l, skew_us, 0), is_last) AS skew_if_last
    FROM per_group
    WHERE arraySum(seen) > 1
),
per_comm AS
(
    -- Per communicator: each rank's groups, windows (distinct: a window may have several of
    -- the communicator's groups) and waiting, and each group's last arriver (its index in the
    -- arrays) with the group's skew and window. Grouped by communicator alone: a fleet's
    -- 1,288 of them, where grouping by window too made a group of nearly every row.
    SELECT
        comm_id,
        sumForEach(seen) AS comm_groups,
        uniqExactForEach(arrayMap(s -> if(s, window_start, NULL), seen)) AS comm_windows_seen,
        sumForEach(arrayMap((x, s) -> if(s, x - transfer_us, 0), e, seen)) AS comm_wait_sum,
        groupArray((last, skew_us, window_start)) AS last_in
    FROM groups
    GROUP BY comm_id
),
facts AS
(
    -- One tuple per communicator rank (kind 0: its groups, windows and waiting) and one per
    -- group (kind 1: its last arriver, window and skew), under their global ranks: a single
    -- ARRAY JOIN unrolls both, and the communicator's arrays are not copied onto every row.
    SELECT
        arrayConcat(
            arrayMap((g, n, w, s) -> (g, 0, n, w, s, toDateTime(0, 'UTC')), global,
                     comm_groups, comm_windows_seen, comm_wait_sum),
            arrayMap(l -> (global[l.1], 1, toUInt64(0), toUInt64(0), l.2, l.3), last_in)
        ) AS items
    FROM
    (
        -- The global ranks lined up with per_comm's arrays.
        SELECT
            p.comm_id, p.comm_groups, p.comm_windows_seen, p.comm_wait_sum, p.last_in,
            arrayMap((g, i) -> if(g >= 0, g, toInt32(i - 1)),
                     arrayResize(c.recorded, length(comm_groups), toInt32(-1)) AS padded,
                     arrayEnumerate(padded)) AS global
        FROM per_comm AS p
        LEFT JOIN communicators AS c ON c.comm_id = p.comm_id
    )
),
per_rank AS
(
    SELECT
        item.1 AS rank,
        countIf(item.2 = 1) AS times_last,
        sumIf(item.3, item.2 = 0) AS groups,
        uniqExactIf(item.6, item.2 = 1) AS windows_last,
        maxIf(item.4, item.2 = 0) AS windows_seen,
        sumIf(item.5, item.2 = 1) AS skew_sum,
        maxIf(item.5, item.2 = 1) AS max_skew_us,
        sumIf(item.5, item.2 = 0) AS wait_sum
    FROM facts
    ARRAY JOIN items AS item
    GROUP BY rank
    HAVING groups > 0
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
