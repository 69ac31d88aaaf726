-- Rollups for gkr-ui's run list and run page, filled on insert, so the page reads a row per
-- process and a row per step instead of every row (benchmarks/telemetry.py: at 10,000 ranks,
-- 10 M collective samples and 10 M step rows, the runs list, the pods-and-nodes table and the
-- curves read 10-20 M rows each, 0.3-0.8 s apiece on two busy cores, and grow with the run).
-- The sources stay the truth; these are derived, and keep the identity to join on.
--
-- Each statement is idempotent: the backfills of rows stored before this migration skip a run
-- the rollup already holds from that table, so a re-run never counts a row twice.

-- Who wrote to a run, from which table: one row per (run, table, role, rank, pod, node), with
-- the rest of the process's identity (constant within it) and when it wrote first and last.
CREATE TABLE IF NOT EXISTS run_members
(
    run           LowCardinality(String),
    source_table  LowCardinality(String),
    role          LowCardinality(String),
    rank          Int32,
    pod           LowCardinality(String),
    node          LowCardinality(String),
    cluster       SimpleAggregateFunction(any, LowCardinality(String)),
    namespace     SimpleAggregateFunction(any, LowCardinality(String)),
    team          SimpleAggregateFunction(any, LowCardinality(String)),
    job           SimpleAggregateFunction(any, LowCardinality(String)),
    kind          SimpleAggregateFunction(any, LowCardinality(String)),
    learner       SimpleAggregateFunction(any, LowCardinality(String)),
    replica_group SimpleAggregateFunction(any, Int32),
    first_ts      SimpleAggregateFunction(min, DateTime64(6, 'UTC')),
    last_ts       SimpleAggregateFunction(max, DateTime64(6, 'UTC')),
    last_step     SimpleAggregateFunction(max, UInt64)  -- train_steps only; 0 elsewhere
)
ENGINE = AggregatingMergeTree
ORDER BY (run, source_table, role, rank, pod, node)
TTL toDateTime(last_ts) + INTERVAL 365 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS train_steps_to_members TO run_members AS
SELECT run, 'train_steps' AS source_table, role, rank, pod, node,
       any(cluster) AS cluster, any(namespace) AS namespace, any(team) AS team,
       any(job) AS job, any(kind) AS kind, any(learner) AS learner,
       any(replica_group) AS replica_group, min(ts) AS first_ts, max(ts) AS last_ts,
       max(step) AS last_step
FROM train_steps
GROUP BY run, role, rank, pod, node;

CREATE MATERIALIZED VIEW IF NOT EXISTS collectives_to_members TO run_members AS
SELECT run, 'collectives' AS source_table, role, rank, pod, node,
       any(cluster) AS cluster, any(namespace) AS namespace, any(team) AS team,
       any(job) AS job, any(kind) AS kind, any(learner) AS learner,
       any(replica_group) AS replica_group, min(ts) AS first_ts, max(ts) AS last_ts,
       toUInt64(0) AS last_step
FROM collectives
GROUP BY run, role, rank, pod, node;

CREATE MATERIALIZED VIEW IF NOT EXISTS fleet_summaries_to_members TO run_members AS
SELECT run, 'fleet_summaries' AS source_table, role, rank, pod, node,
       any(cluster) AS cluster, any(namespace) AS namespace, any(team) AS team,
       any(job) AS job, any(kind) AS kind, any(learner) AS learner,
       any(replica_group) AS replica_group, min(ts) AS first_ts, max(ts) AS last_ts,
       toUInt64(0) AS last_step
FROM fleet_summaries
GROUP BY run, role, rank, pod, node;

CREATE MATERIALIZED VIEW IF NOT EXISTS events_to_members TO run_members AS
SELECT run, 'events' AS source_table, role, rank, pod, node,
       any(cluster) AS cluster, any(namespace) AS namespace, any(team) AS team,
       any(job) AS job, any(kind) AS kind, any(learner) AS learner,
       any(replica_group) AS replica_group, min(ts) AS first_ts, max(ts) AS last_ts,
       toUInt64(0) AS last_step
FROM events
GROUP BY run, role, rank, pod, node;

-- A run's training steps summed over its ranks: one row per (run, step).
CREATE TABLE IF NOT EXISTS train_step_totals
(
    run               LowCardinality(String),
    step              UInt64,
    rows              SimpleAggregateFunction(sum, UInt64),
    loss_sum          SimpleAggregateFunction(sum, Float64),
    loss_min          SimpleAggregateFunction(min, Float64),
    loss_max          SimpleAggregateFunction(max, Float64),
    samples_per_s_sum SimpleAggregateFunction(sum, Float64),
    tokens_per_s_sum  SimpleAggregateFunction(sum, Float64),
    step_time_s_sum   SimpleAggregateFunction(sum, Float64),
    step_time_s_max   SimpleAggregateFunction(max, Float64),
    last_ts           SimpleAggregateFunction(max, DateTime64(6, 'UTC'))
)
ENGINE = AggregatingMergeTree
ORDER BY (run, step)
TTL toDateTime(last_ts) + INTERVAL 180 DAY;

CREATE MATERIALIZED VIEW IF NOT EXISTS train_steps_to_totals TO train_step_totals AS
SELECT run, step, count() AS rows, sum(loss) AS loss_sum, min(loss) AS loss_min,
       max(loss) AS loss_max, sum(samples_per_s) AS samples_per_s_sum,
       sum(tokens_per_s) AS tokens_per_s_sum, sum(step_time_s) AS step_time_s_sum,
       max(step_time_s) AS step_time_s_max, max(ts) AS last_ts
FROM train_steps
GROUP BY run, step;

-- The rows stored before this migration, a run at a time per table.
INSERT INTO run_members
SELECT run, 'train_steps', role, rank, pod, node, any(cluster), any(namespace), any(team),
       any(job), any(kind), any(learner), any(replica_group), min(ts), max(ts), max(step)
FROM train_steps
WHERE run NOT IN (SELECT DISTINCT run FROM run_members WHERE source_table = 'train_steps')
GROUP BY run, role, rank, pod, node;

INSERT INTO run_members
SELECT run, 'collectives', role, rank, pod, node, any(cluster), any(namespace), any(team),
       any(job), any(kind), any(learner), any(replica_group), min(ts), max(ts), toUInt64(0)
FROM collectives
WHERE run NOT IN (SELECT DISTINCT run FROM run_members WHERE source_table = 'collectives')
GROUP BY run, role, rank, pod, node;

INSERT INTO run_members
SELECT run, 'fleet_summaries', role, rank, pod, node, any(cluster), any(namespace), any(team),
       any(job), any(kind), any(learner), any(replica_group), min(ts), max(ts), toUInt64(0)
FROM fleet_summaries
WHERE run NOT IN (SELECT DISTINCT run FROM run_members WHERE source_table = 'fleet_summaries')
GROUP BY run, role, rank, pod, node;

INSERT INTO run_members
SELECT run, 'events', role, rank, pod, node, any(cluster), any(namespace), any(team),
       any(job), any(kind), any(learner), any(replica_group), min(ts), max(ts), toUInt64(0)
FROM events
WHERE run NOT IN (SELECT DISTINCT run FROM run_members WHERE source_table = 'events')
GROUP BY run, role, rank, pod, node;

INSERT INTO train_step_totals
SELECT run, step, count(), sum(loss), min(loss), max(loss), sum(samples_per_s),
       sum(tokens_per_s), sum(step_time_s), max(step_time_s), max(ts)
FROM train_steps
WHERE run NOT IN (SELECT DISTINCT run FROM train_step_totals)
GROUP BY run, step;
