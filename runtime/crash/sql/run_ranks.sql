-- Where each rank of a run got to: its last step, its loss there, its mean and worst step
-- time, and when it last wrote (a rank that stopped early stands out).
-- Parameters: {run:String}.
SELECT rank, any(node) AS node, max(step) AS last_step, argMax(loss, step) AS last_loss,
       round(avg(step_time_s), 4) AS mean_step_s, round(max(step_time_s), 4) AS max_step_s,
       max(ts) AS last_ts
FROM train_steps
WHERE run = {run:String}
GROUP BY rank
ORDER BY rank
