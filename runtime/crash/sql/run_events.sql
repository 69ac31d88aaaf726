-- What happened around a run: its own events (start, failure, crash bundle, diagnosis) and,
-- on a cluster, the Kubernetes events and Warden's actions on its job's pods and on the nodes
-- its ranks ran on.
-- Parameters: {run:String}, {limit:UInt32}.
SELECT ts, source, object_kind, object_name, reason, severity, message, node, pod, count
FROM events
WHERE run = {run:String}
   OR (namespace != '' AND (namespace, job) IN
        (SELECT namespace, job FROM train_steps WHERE run = {run:String} AND job != ''))
   OR (object_kind = 'Node' AND node IN
        (SELECT DISTINCT node FROM train_steps WHERE run = {run:String} AND node != ''
         AND cluster != 'local'))
ORDER BY ts DESC
LIMIT {limit:UInt32}
