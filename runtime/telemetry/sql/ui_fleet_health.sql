-- gkr-ui's health of each auxiliary service of a run: its latest summary, and the restarts
-- and errors of the whole run (a summary counts those of its own window).
-- Parameters: {run:String}.
-- Columns: service, last_ts, workers_healthy, workers_known, pending, throughput_rps,
-- restarts, errors.
SELECT
    service, max(ts) AS last_ts,
    argMax(workers_healthy, ts) AS workers_healthy, argMax(workers_known, ts) AS workers_known,
    argMax(pending, ts) AS pending, argMax(throughput_rps, ts) AS throughput_rps,
    sum(restarts) AS restarts, sum(errors) AS errors
FROM fleet_summaries
WHERE run = {run:String}
GROUP BY service
ORDER BY service
