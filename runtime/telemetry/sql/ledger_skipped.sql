-- The ledger files of the runs whose partial last line a load skipped (a rank killed in the
-- middle of its write). Parameters: {runs:Array(String)}.
SELECT DISTINCT file
FROM sample_ledger_skipped
WHERE run_id IN {runs:Array(String)}
ORDER BY file
