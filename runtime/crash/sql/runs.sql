-- `gkr runs`: every run the driver recorded (its Started, Succeeded and Failed events, see
-- runtime/train/driver.py), newest first, with its crash bundle (the driver's CrashBundle
-- event) and where its diagnosis stands (the last event `gkr diagnose` wrote).
-- Parameters: {run:String} ('' for every run), {limit:UInt32}.
SELECT run,
       argMaxIf(reason, ts, reason IN ('Started', 'Succeeded', 'Failed')) AS state,
       minIf(ts, reason = 'Started') AS started,
       maxIf(ts, reason IN ('Succeeded', 'Failed')) AS ended,
       argMaxIf(message, ts, reason = 'CrashBundle') AS bundle,
       argMaxIf(reason, ts, source = 'diagnose') AS diagnosis,
       anyIf(job, job != '') AS job, anyIf(cluster, cluster != '') AS cluster
FROM events
WHERE run != '' AND (source = 'diagnose' OR (source = 'driver' AND object_kind = 'Run'))
  AND ({run:String} = '' OR run = {run:String})
GROUP BY run
HAVING countIf(source = 'driver') > 0
ORDER BY started DESC, run
LIMIT {limit:UInt32}
