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
-- the source's rank.
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
-- each (window, group) is one row holding its ranks' sums in arrays indexed by their rank in
-- the communicator (-Resample), not a hash table of window x group x rank. Communicators of
-- up to 64 ranks are summed apart, into arrays as long as the largest of them, so that a
-- thousand tensor-parallel groups of 8 do not each hold an array as long as the data-parallel
-- communicator. The group is grouped on by a hash of its four columns, which ClickHouse
-- aggregates several times faster than the columns. Global ranks are looked up per group,
-- not per sample. straggler_ranks.sql begins with the same steps (a test keeps them equal).
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
        any((comm_id, comm_name, coll, msg_size_bytes, algo)) AS names,
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
        any((comm_id, comm_name, coll, msg_size_bytes, algo)) AS names,
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
    SELECT
        window_start, names.1 AS comm_id, names.2 AS comm_name, names.3 AS coll,
        names.4 AS msg_size_bytes, names.5 AS algo, first, sample_counts,
        c.global_ranks AS global_ranks,
        arrayFilter((x, n) -> n > 0, arrayMap((t, n) -> t / n, time_sums, sample_counts),
                    sample_counts) AS e,
        length(e) AS ranks,
        arrayMin(e) AS transfer_us,
        first - 1 + arrayFilter((i, n) -> n > 0, arrayEnumerate(sample_counts),
                                sample_counts)[indexOf(e, transfer_us)] AS last_in_comm
    FROM per_group AS g
    LEFT JOIN communicators AS c ON c.comm_id = g.names.1
    WHERE ranks > 1
)
SELECT
    window_start, comm_id, comm_name, coll, msg_size_bytes, algo, ranks,
    if(last_in_comm < length(global_ranks) AND global_ranks[last_in_comm + 1] >= 0,
       global_ranks[last_in_comm + 1], last_in_comm) AS last_rank,
    transfer_us,
    arrayMax(e) - transfer_us AS skew_us,
    arrayReduce('quantileExact(0.5)', e) - transfer_us AS wait_p50_us,
    -- The global ranks lined up with sample_counts, of the ranks seen.
    arraySort(arrayMap(
        (r, x) -> (r, x - transfer_us),
        arrayFilter((g, n) -> n > 0, arrayMap(
            (g, i) -> if(g >= 0, g, toInt32(first + i - 1)),
            arraySlice(arrayResize(global_ranks, first + length(sample_counts), toInt32(-1)),
                       first + 1, length(sample_counts)) AS lined_up,
            arrayEnumerate(lined_up)), sample_counts),
        e)) AS waiting_us
FROM groups
ORDER BY window_start, comm_id, coll, msg_size_bytes, algo
