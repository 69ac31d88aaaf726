-- A run's throughput for the driver's closing line: per-rank means over every step, and the
-- highest peaks of memory any rank reached (NULL where nothing was measured).
-- Parameters: {run:String}.
-- Columns: tokens_per_s_mean, mfu_mean, cuda_peak, rss_peak.
SELECT avg(tokens_per_s) AS tokens_per_s_mean, avg(mfu) AS mfu_mean,
       max(cuda_peak_allocated_bytes) AS cuda_peak, max(rss_peak_bytes) AS rss_peak
FROM train_steps
WHERE run = {run:String}
