-- The auxiliary services' health over the run: the FleetMonitor's summaries.
-- Parameters: {run:String}.
SELECT ts, step, service, throughput_rps, queue_wait_ms_p99, process_ms_p99, pending,
       workers_healthy, workers_known, restarts, errors
FROM fleet_summaries
WHERE run = {run:String}
ORDER BY ts
