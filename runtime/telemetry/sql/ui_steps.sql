-- gkr-ui's loss and throughput curves: train_steps per step, over ranks, in buckets of
-- {bucket:UInt64} steps so a long run draws at most about a thousand points. Read from the
-- per-step sums of migration 0004 (train_step_totals: a row per step, not per rank and step).
-- Throughput is the run's: per step, the sum of every rank's samples/s (tokens/s), averaged
-- over the bucket's steps. `ranks` is the most rows one step of the bucket has (each rank
-- writes one row a step).
-- Parameters: {run:String}, {bucket:UInt64}.
-- Columns: step_from (the bucket's first step), ranks, loss_mean, loss_min, loss_max,
-- run_samples_per_s, run_tokens_per_s, step_time_mean_s, step_time_max_s.
-- (No alias is the name of a column another expression reads: ClickHouse would read the
-- alias there, e.g. avg(loss) inside min(loss).)
SELECT
    intDiv(step, {bucket:UInt64}) * {bucket:UInt64} AS step_from,
    max(step_rows) AS ranks,
    sum(loss_total) / sum(step_rows) AS loss_mean,
    min(loss_low) AS loss_min, max(loss_high) AS loss_max,
    sum(samples_total) / count() AS run_samples_per_s,
    sum(tokens_total) / count() AS run_tokens_per_s,
    sum(step_time_total) / sum(step_rows) AS step_time_mean_s,
    max(step_time_high) AS step_time_max_s
FROM
(
    -- Rows of one step may sit in several parts until they merge: sum them first.
    SELECT step, sum(rows) AS step_rows, sum(loss_sum) AS loss_total,
           min(loss_min) AS loss_low, max(loss_max) AS loss_high,
           sum(samples_per_s_sum) AS samples_total, sum(tokens_per_s_sum) AS tokens_total,
           sum(step_time_s_sum) AS step_time_total, max(step_time_s_max) AS step_time_high
    FROM train_step_totals
    WHERE run = {run:String}
    GROUP BY step
)
GROUP BY step_from
ORDER BY step_from
