-- Which table the straggler analysis of a run reads: its samples, and how many of them the
-- 10-second buckets of migration 0003 hold. Equal counts: the buckets are complete and give
-- the same answer from far fewer rows; else (rows from before the migration, a backfill cut
-- short, rows past one table's TTL) the samples themselves are read.
-- Parameters: {run:String}. Columns: samples, bucketed.
SELECT
    (SELECT count() FROM collectives WHERE run = {run:String}) AS samples,
    (SELECT sum(samples) FROM collective_buckets WHERE run = {run:String}) AS bucketed
