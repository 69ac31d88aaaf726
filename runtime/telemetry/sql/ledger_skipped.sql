-- The ledger files of a run whose partial last line a load skipped (a rank killed in the
-- middle of its write). Parameters: {run:String}.
SELECT DISTINCT file
FROM sample_ledger_skipped
WHERE run_id = {run:String}
ORDER BY file
