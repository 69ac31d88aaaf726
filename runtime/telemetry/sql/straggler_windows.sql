-- Per window, per collective group: the last arriver, the skew, and each rank's waiting
-- (seed §8.3). A group is (communicator, collective, message size, algorithm where the source
-- gives one). e_i is rank i's mean duration of the group's collectives in the window: a rank
-- that arrives early waits inside the collective for the last one, so the rank with the
-- smallest e_i is the last arriver (the lowest rank in the communicator on a tie), min(e_i)
-- estimates the transfer itself, and e_i - min is rank i's waiting time. A group seen from
-- one rank only has no skew and is left out.
-- Ranks are global training ranks. A source may give a process's rank within the
-- communicator (NCCL Inspector does): it becomes the rank the process that wrote it announced
-- (by host name and pid, schema/0006_global_ranks.sql); a process that announced none keeps
-- the source's rank. Ranks outside [0, 2^20) are left out (schema/0010_collective_groups.sql).
-- Parameters: {run:String}, {window_s:UInt32}, {groups_per_window:UInt32}: the most groups a
-- window keeps, those of largest skew (4294967295: every group); {source:String},
-- {rows:Identifier}: the source
-- is collective_group_buckets (the samples summed per 30 s and group: for windows that are
-- multiples of 30 s, once a run's group buckets hold all its samples; see
-- straggler_source.sql), read by the first branch of `per_group`, or a table of per-rank rows,
-- read by the second: collective_buckets (summed per 10 s and rank: for other multiples of
-- 10 s) or collective_samples (every sample). `rows` names the per-rank table, and must be one
-- also when the group buckets are read (collective_buckets, say).
-- Columns: window_start, comm_id, comm_name, coll, msg_size_bytes, algo, ranks, last_rank,
-- transfer_us, skew_us, wait_p50_us (the median rank's waiting), waiting_us
-- (Array(Tuple(rank, waiting)) in rank order; leave the column out when not needed, e.g.
-- `SELECT * EXCEPT (waiting_us) FROM (…)`, and it is never computed: at 10,000 ranks it is
-- most of the time).
--
-- How, for speed (benchmarks/telemetry.py: 10,240 ranks in 1,288 communicators, an hour of
-- 30 s windows): each (window, group) is one row holding its ranks' sums in arrays indexed by
-- their rank in the communicator, merged from the group buckets' arrays (or, from per-rank
-- rows, put at their index by groupArrayInsertAt), not a hash table of window x group x
-- rank. Only one branch of `per_group` reads rows: the other's condition on {source} is false.
-- Global ranks are looked up per group kept, not per sample. straggler_ranks.sql begins with the
-- same steps (a test keeps them equal).
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
    -- Each group's means (of the ranks seen), transfer and skew, and its place in its window
    -- by skew: what picks the groups kept.
    SELECT
        window_start, comm_id, comm_name, coll, msg_size_bytes, algo, counts,
        arrayFilter((x, n) -> n > 0, arrayMap((t, n) -> t / n, sums, counts), counts) AS e,
        length(e) AS ranks,
        arrayMin(e) AS transfer_us,
        arrayMax(e) - transfer_us AS skew_us
    FROM per_group
    WHERE ranks > 1
    ORDER BY window_start, skew_us DESC, comm_id, coll, msg_size_bytes, algo
    LIMIT {groups_per_window:UInt32} BY window_start
),
kept AS
(
    -- The kept groups' ranks as global ranks (only theirs: a fleet's window has 1,288 groups).
    SELECT
        g.*,
        arrayFilter((r, n) -> n > 0, arrayMap((r, i) -> if(r >= 0, r, toInt32(i - 1)),
                    arrayResize(c.recorded, length(counts), toInt32(-1)) AS padded,
                    arrayEnumerate(padded)), counts) AS seen_ranks
    FROM groups AS g
    LEFT JOIN communicators AS c ON c.comm_id = g.comm_id
)
SELECT
    window_start, comm_id, comm_name, coll, msg_size_bytes, algo, ranks,
    seen_ranks[indexOf(e, transfer_us)] AS last_rank,
    transfer_us,
    skew_us,
    arrayReduce('quantileExact(0.5)', e) - transfer_us AS wait_p50_us,
    arraySort(arrayMap((r, x) -> (r, x - transfer_us), seen_ranks, e)) AS waiting_us
FROM kept
ORDER BY window_start, comm_id, coll, msg_size_bytes, algo
