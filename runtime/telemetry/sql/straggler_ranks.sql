-- Persistent stragglers (seed §8.3): across the windows of straggler_windows.sql, how often
-- each rank arrived last and by how much, with the pod and node it ran on (its latest).
-- Parameters: as straggler_windows.sql: {run:String}, {window_s:UInt32}, {source:Identifier}.
-- Columns: rank, pod, node, times_last (groups it was last in), groups (groups it was in),
-- share_last, windows_last (windows it was last in, in any group), windows_seen,
-- mean_skew_us and max_skew_us (the skew of the groups it was last in), mean_waiting_us
-- (its own mean waiting over all its groups: small for a straggler).
WITH per_rank AS
(
    SELECT
        toStartOfInterval(bucket, toIntervalSecond({window_s:UInt32})) AS window_start,
        comm_id, coll, msg_size_bytes, algo, rank,
        sum(exec_time_us_sum) / sum(samples) AS e
    FROM {source:Identifier}
    WHERE run = {run:String}
    GROUP BY window_start, comm_id, coll, msg_size_bytes, algo, rank
),
groups AS
(
    SELECT
        window_start, argMin(rank, e) AS last_rank, max(e) - min(e) AS skew_us,
        min(e) AS transfer_us, groupArray((rank, e)) AS ranks_e
    FROM per_rank
    GROUP BY window_start, comm_id, coll, msg_size_bytes, algo
    HAVING count() > 1
),
waiting AS
(
    SELECT window_start, tupleElement(re, 1) AS rank, tupleElement(re, 2) - transfer_us AS wait_us,
           rank = last_rank AS is_last, skew_us
    FROM groups ARRAY JOIN ranks_e AS re
),
placement AS
(
    SELECT rank, argMax(pod, bucket) AS pod, argMax(node, bucket) AS node
    FROM {source:Identifier} WHERE run = {run:String} GROUP BY rank
)
SELECT
    w.rank AS rank, p.pod AS pod, p.node AS node,
    countIf(w.is_last) AS times_last,
    count() AS groups,
    times_last / groups AS share_last,
    uniqExactIf(w.window_start, w.is_last) AS windows_last,
    uniqExact(w.window_start) AS windows_seen,
    if(times_last > 0, sumIf(w.skew_us, w.is_last) / times_last, 0) AS mean_skew_us,
    maxIf(w.skew_us, w.is_last) AS max_skew_us,
    avg(w.wait_us) AS mean_waiting_us
FROM waiting AS w
LEFT JOIN placement AS p ON p.rank = w.rank
GROUP BY w.rank, p.pod, p.node
ORDER BY times_last DESC, mean_skew_us DESC, rank
