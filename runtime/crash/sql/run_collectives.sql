-- Each rank's collectives: how many, their mean and worst duration, and the last sequence
-- number it reached (a rank behind the others stopped or hung there).
-- Parameters: {run:String}.
SELECT rank, coll, count() AS calls, round(avg(exec_time_us) / 1000, 3) AS mean_ms,
       round(max(exec_time_us) / 1000, 3) AS max_ms, max(coll_sn) AS last_sn
FROM collectives
WHERE run = {run:String}
GROUP BY rank, coll
ORDER BY rank, coll
