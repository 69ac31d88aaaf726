-- gkr-ui's runs: every run seen in the telemetry tables, newest first, with when it was seen,
-- the last step it recorded, how many ranks wrote, and its state from the driver's run events
-- (runtime/train/driver.py writes Started, then Succeeded or Failed). Who wrote what and when
-- is read from run_members (migration 0004: a row per process and table, kept on insert), so
-- the list costs the same for a run of a million rows as for one of a billion.
-- Parameters: {run:String} ('' for every run), {limit:UInt32}.
-- Columns: run, cluster, namespace, team, job, first_ts, last_ts, last_step (NULL without
-- train_steps), ranks, state.
WITH seen AS
(
    SELECT run, min(first_) AS first_ts, max(last_) AS last_ts,
           anyIf(cluster_, cluster_ != '') AS cluster,
           anyIf(namespace_, namespace_ != '') AS namespace,
           anyIf(team_, team_ != '') AS team, anyIf(job_, job_ != '') AS job,
           uniqExactIf(rank, rank >= 0) AS ranks,
           if(countIf(source_table = 'train_steps') > 0,
              maxIf(step_, source_table = 'train_steps'), NULL) AS last_step
    FROM
    (
        SELECT run, source_table, rank, cluster AS cluster_, namespace AS namespace_,
               team AS team_, job AS job_, first_ts AS first_, last_ts AS last_,
               last_step AS step_
        FROM run_members
        WHERE (source_table != 'events' OR run != '')
          AND ({run:String} = '' OR run = {run:String})
    )
    GROUP BY run
),
state AS
(
    SELECT run, argMax(reason, ts) AS state FROM events
    WHERE source = 'driver' AND object_kind = 'Run'
      AND reason IN ('Started', 'Succeeded', 'Failed')
      AND ({run:String} = '' OR run = {run:String})
    GROUP BY run
)
SELECT s.run AS run, s.cluster AS cluster, s.namespace AS namespace, s.team AS team,
       s.job AS job, s.first_ts AS first_ts, s.last_ts AS last_ts,
       s.last_step AS last_step, s.ranks AS ranks, coalesce(e.state, '') AS state
FROM seen AS s
LEFT JOIN state AS e ON e.run = s.run
ORDER BY s.last_ts DESC, s.run
LIMIT {limit:UInt32}
