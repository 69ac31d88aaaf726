-- Per window, per collective group: the last arriver, the skew, and each rank's waiting
-- (seed §8.3). A group is (communicator, collective, message size, algorithm where the source
-- gives one). e_i is rank i's mean duration of the group's collectives in the window: a rank
-- that arrives early waits inside the collective for the last one, so the rank with the
-- smallest e_i is the last arriver, min(e_i) estimates the transfer itself, and e_i - min is
-- rank i's waiting time. A group seen from one rank only has no skew and is left out.
-- Parameters: {run:String}, {window_s:UInt32}, {source:Identifier}: collective_buckets (the
-- samples summed per 10 s: for windows that are multiples of 10 s, once a run's buckets hold
-- all its samples; see straggler_source.sql) or collective_samples (every sample).
-- Columns: window_start, comm_id, comm_name, coll, msg_size_bytes, algo, ranks, last_rank,
-- transfer_us, skew_us, wait_p50_us (the median rank's waiting), waiting_us
-- (Array(Tuple(rank, waiting)) in rank order).
WITH per_rank AS
(
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        comm_id, any(comm_name) AS comm_name, coll, msg_size_bytes, algo, rank,
        sum(exec_time_us_sum) / sum(samples) AS e
    FROM {source:Identifier}
    WHERE run = {run:String}
    GROUP BY window_start, comm_id, coll, msg_size_bytes, algo, rank
)
SELECT
    window_start, comm_id, any(comm_name) AS comm_name, coll, msg_size_bytes, algo,
    count() AS ranks,
    argMin(rank, e) AS last_rank,
    min(e) AS transfer_us,
    max(e) - min(e) AS skew_us,
    quantileExact(0.5)(e) - min(e) AS wait_p50_us,
    arraySort(arrayMap(x -> (x.1, x.2 - transfer_us), groupArray((rank, e)))) AS waiting_us
FROM per_rank
GROUP BY window_start, comm_id, coll, msg_size_bytes, algo
HAVING ranks > 1
ORDER BY window_start, comm_id, coll, msg_size_bytes, algo
