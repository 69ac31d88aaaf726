-- gkr-ui's per-rank throughput table: each training rank of a run over all its steps, so a
-- slow GPU, a low-MFU rank or one near its memory stands out beside the others.
-- Memory is named for where it was measured (migration 0007): the CUDA allocator's peaks
-- (NULL on CPU ranks) and the process's peak resident set. MFU is NULL where unknown.
-- Parameters: {run:String}.
-- Columns: rank, pod, node, steps, last_step, tokens_per_s_mean, mfu_mean,
-- step_time_mean_s, step_time_max_s, cuda_peak_allocated_bytes, cuda_peak_reserved_bytes,
-- rss_peak_bytes.
SELECT rank, any(pod) AS pod, any(node) AS node, count() AS steps, max(step) AS last_step,
       avg(tokens_per_s) AS tokens_per_s_mean, avg(mfu) AS mfu_mean,
       avg(step_time_s) AS step_time_mean_s, max(step_time_s) AS step_time_max_s,
       max(cuda_peak_allocated_bytes) AS cuda_peak_allocated_bytes,
       max(cuda_peak_reserved_bytes) AS cuda_peak_reserved_bytes,
       max(rss_peak_bytes) AS rss_peak_bytes
FROM train_steps
WHERE run = {run:String}
GROUP BY rank
ORDER BY rank
