-- gkr-ui's auxiliary services over time (FleetMonitor summaries, seed §8.2), per service in
-- buckets of {bucket_s:UInt32} seconds: the latency split (queue wait, processing, transfer;
-- p50 averaged, p99 the bucket's worst), the rate, the backlog and the workers' health.
-- Parameters: {run:String}, {bucket_s:UInt32}.
-- Columns: service, at (the bucket's start), throughput_rps, queue_wait_ms_p50,
-- queue_wait_ms_p99, process_ms_p50, process_ms_p99, transfer_ms_p50, transfer_ms_p99,
-- pending, workers_healthy, workers_known, restarts, errors.
SELECT
    service,
    toStartOfInterval(ts, toIntervalSecond({bucket_s:UInt32})) AS at,
    avg(throughput_rps) AS throughput_rps,
    avg(queue_wait_ms_p50) AS queue_wait_ms_p50, max(queue_wait_ms_p99) AS queue_wait_ms_p99,
    avg(process_ms_p50) AS process_ms_p50, max(process_ms_p99) AS process_ms_p99,
    avg(transfer_ms_p50) AS transfer_ms_p50, max(transfer_ms_p99) AS transfer_ms_p99,
    max(pending) AS pending, min(workers_healthy) AS workers_healthy,
    max(workers_known) AS workers_known, sum(restarts) AS restarts, sum(errors) AS errors
FROM fleet_summaries
WHERE run = {run:String}
GROUP BY service, at
ORDER BY service, at
