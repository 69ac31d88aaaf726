-- gkr-ui's per-rank curves: tokens/s, MFU, step time and peak memory of some ranks of a run,
-- per bucket of {bucket:UInt64} steps (a long run draws about a thousand points a rank).
-- Parameters: {run:String}, {ranks:Array(Int32)}, {bucket:UInt64}.
-- Columns: rank, step_from, tokens_per_s_mean, mfu_mean, step_time_mean_s,
-- cuda_peak_allocated_bytes, rss_peak_bytes.
SELECT rank, intDiv(step, {bucket:UInt64}) * {bucket:UInt64} AS step_from,
       avg(tokens_per_s) AS tokens_per_s_mean, avg(mfu) AS mfu_mean,
       avg(step_time_s) AS step_time_mean_s,
       max(cuda_peak_allocated_bytes) AS cuda_peak_allocated_bytes,
       max(rss_peak_bytes) AS rss_peak_bytes
FROM train_steps
WHERE run = {run:String} AND has({ranks:Array(Int32)}, rank)
GROUP BY rank, step_from
ORDER BY rank, step_from
