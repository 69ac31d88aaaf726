-- The ledger rows stored per writer of a run (one file each: a rank incarnation), so that a
-- load inserts only a file's lines not yet stored. Parameters: {run:String}.
SELECT started, rank, pid, count() AS stored
FROM sample_ledger
WHERE run_id = {run:String}
GROUP BY started, rank, pid
