-- gkr-ui's recent events (Kubernetes events, Warden's actions, the runtime's notices), newest
-- first; of one run, or of all.
-- Parameters: {run:String} ('' for all), {limit:UInt32}.
-- Columns: ts, run, source, object_kind, object_name, reason, severity, message, node, pod,
-- count.
SELECT ts, run, source, object_kind, object_name, reason, severity, message, node, pod, count
FROM events
WHERE {run:String} = '' OR run = {run:String}
ORDER BY ts DESC
LIMIT {limit:UInt32}
