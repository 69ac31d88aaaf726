-- Throughput of real training (issue 23): per rank and step, the tokens the step computed,
-- the model FLOPs utilisation (runtime/telemetry/throughput.py: tokens/s x the model's
-- training FLOPs per token / the device's peak; NULL where the peak or the model's FLOPs
-- are unknown) and peak memory, named for where it was measured: the CUDA caching
-- allocator's peaks of the step (NULL on a CPU rank) and the process's peak resident set
-- since it started. Rows written before this migration read NULL in every new column.
-- ADD COLUMN IF NOT EXISTS makes a re-run change nothing.

ALTER TABLE train_steps
    ADD COLUMN IF NOT EXISTS tokens                    Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS mfu                       Nullable(Float64),
    ADD COLUMN IF NOT EXISTS cuda_peak_allocated_bytes Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS cuda_peak_reserved_bytes  Nullable(UInt64),
    ADD COLUMN IF NOT EXISTS rss_peak_bytes            Nullable(UInt64);
