-- The run's loss curve and step time, averaged over ranks, per step.
-- Parameters: {run:String}.
SELECT step, round(avg(loss), 6) AS loss, round(max(step_time_s), 4) AS slowest_rank_s,
       count() AS ranks
FROM train_steps
WHERE run = {run:String}
GROUP BY step
ORDER BY step
