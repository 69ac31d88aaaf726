-- gkr-ui's pods and nodes of a run: every (role, rank, pod, node) that wrote a row, with the
-- rest of its identity (runtime/identity.py) and when it was seen. Read from run_members
-- (migration 0004: a row per process and table, kept on insert), not from the rows themselves.
-- Parameters: {run:String}.
-- Columns: role, rank, pod, node, cluster, namespace, learner, replica_group, first_ts, last_ts.
SELECT role, rank, pod, node, any(cluster_) AS cluster, any(namespace_) AS namespace,
       any(learner_) AS learner, any(replica_group_) AS replica_group,
       min(first_) AS first_ts, max(last_) AS last_ts
FROM
(
    SELECT role, rank, pod, node, cluster AS cluster_, namespace AS namespace_,
           learner AS learner_, replica_group AS replica_group_,
           first_ts AS first_, last_ts AS last_
    FROM run_members
    WHERE run = {run:String}
)
GROUP BY role, rank, pod, node
ORDER BY role, rank, pod, node
