-- Which table the straggler analysis of a run reads: its samples, and how many of them the
-- 10-second per-rank buckets of migration 0003 and the 30-second group buckets of migration
-- 0010 hold. Equal counts: those buckets are complete and give the same answer from far fewer
-- rows; else (rows from before a migration, a backfill cut short, rows past one table's TTL)
-- the samples themselves are read. Ranks outside [0, 2^20) are in none
-- (schema/0010_collective_groups.sql).
-- Parameters: {run:String}. Columns: samples, bucketed, grouped.
SELECT
    (SELECT count() FROM collectives
     WHERE run = {run:String} AND rank BETWEEN 0 AND 1048575) AS samples,
    (SELECT sum(samples) FROM collective_buckets
     WHERE run = {run:String} AND rank BETWEEN 0 AND 1048575) AS bucketed,
    (SELECT sum(samples) FROM collective_group_buckets WHERE run = {run:String}) AS grouped
