-- The last collectives each rank's Flight Recorder saw: where every rank stood when the run
-- ended (entries still 'scheduled' or 'started' were never completed).
-- Parameters: {run:String}.
SELECT rank, pg_name, collective_seq_id, profiling_name, state, duration_ms
FROM flight_recorder
WHERE run = {run:String}
ORDER BY rank, collective_seq_id DESC
LIMIT 20 BY rank
