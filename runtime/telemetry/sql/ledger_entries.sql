-- The sample ledger of one run, or of runs judged as one stream (a DiLoCo experiment's
-- learners), as the verdict reads it (runtime/telemetry/ledger_verdict.py):
-- one row per micro-batch of a ledger row, numbered by ledger row (`row`), in row order.
-- A line stored twice (a shipper's retry) counts once: LIMIT 1 BY its writer and step.
-- Parameters: {runs:Array(String)}.
SELECT row, indexOf({runs:Array(String)}, run_id) - 1 AS run, step, group, rank, pid, slot, slots, start, count, batch_start, batch_count,
       epoch_size, started, resumed_from, indexOf(['fresh', 'checkpoint', 'heal'], origin) - 1
       AS origin, at
FROM
(
    SELECT rowNumberInAllBlocks() AS row, *
    FROM
    (
        SELECT run_id, step, group, rank, slot, slots, starts, count, batch_starts, batch_count,
               epoch_size, started, resumed_from, origin, at, pid
        FROM sample_ledger
        WHERE run_id IN {runs:Array(String)}
        ORDER BY run_id, started, rank, pid, step
        LIMIT 1 BY run_id, started, rank, pid, step
    )
)
ARRAY JOIN starts AS start, batch_starts AS batch_start, arrayEnumerate(starts) AS micro
ORDER BY row, micro
