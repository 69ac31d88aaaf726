-- NCCL Inspector records parsed once, by the engine's JSONEachRow reader, into typed columns
-- (issue 27). The path of 0002/0005 stores each record as a string and extracts it again in
-- its view; here the reader fills the record's objects into named tuples as it reads the line
-- (reference/telemetry.md §3), and the view only renames. Fluent Bit posts the nodes' lines
-- here (`INSERT INTO nccl_records FORMAT JSONEachRow`, generator/platform/telemetry.py) and
-- `gkr telemetry ingest inspector` inserts the files it checked
-- (runtime/telemetry/inspector_load.py); a record gives the same row either way, and the same
-- as through `nccl_raw`.
-- Record keys: NVIDIA/nccl plugins/profiler/inspector/inspector_json.cc (format v4.x). Keys
-- the tuples do not name (git_rev, verbose event traces, v4.2's coll_algo) are skipped. A
-- record without a coll_perf or p2p_perf object (a dump_stats record) gives no row. An absent
-- `pod` (NULL) falls back to the record's hostname, the pod's name in Kubernetes; an absent
-- comm_name (before v2.30) is 'unknown'. NaN, written as the string "nan", and a bare `inf`
-- (an infinite bandwidth) are stored as NULL, as 0002 and 0005 store them.

CREATE TABLE IF NOT EXISTS nccl_records
(
    header    Tuple(id String, comm_name Nullable(String), rank Int64, n_ranks UInt64,
                    nnodes UInt64),
    metadata  Tuple(inspector_output_format_version String, dump_timestamp_us Int64,
                    hostname String, pid UInt64),
    coll_perf Tuple(coll String, coll_sn UInt64, coll_msg_size_bytes UInt64,
                    coll_exec_time_us Float64, coll_timing_source String,
                    coll_algobw_gbs Float64, coll_busbw_gbs Float64),
    p2p_perf  Tuple(p2p String, p2p_sn UInt64, p2p_msg_size_bytes UInt64,
                    p2p_exec_time_us Float64, p2p_timing_source String,
                    p2p_algobw_gbs Float64, p2p_busbw_gbs Float64),
    cluster   String,
    namespace String,
    team      String,
    job       String,
    kind      String,
    run       String,
    pod       Nullable(String),
    node      String
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS nccl_records_to_collectives TO collectives AS
WITH
    p2p_perf.p2p != '' AS is_p2p,
    if(is_p2p, p2p_perf.p2p_algobw_gbs, coll_perf.coll_algobw_gbs) AS algobw,
    if(is_p2p, p2p_perf.p2p_busbw_gbs, coll_perf.coll_busbw_gbs) AS busbw
SELECT
    fromUnixTimestamp64Micro(metadata.dump_timestamp_us, 'UTC') AS ts,
    cluster,
    namespace,
    team,
    job,
    kind,
    run,
    '' AS learner,
    -1 AS replica_group,
    toInt32(header.rank) AS rank,
    'worker' AS role,
    ifNull(pod, metadata.hostname) AS pod,
    node,
    'nccl_inspector' AS source,
    header.id AS comm_id,
    ifNull(header.comm_name, 'unknown') AS comm_name,
    toUInt32(header.n_ranks) AS n_ranks,
    toUInt32(header.nnodes) AS nnodes,
    if(is_p2p, p2p_perf.p2p, coll_perf.coll) AS coll,
    if(is_p2p, p2p_perf.p2p_sn, coll_perf.coll_sn) AS coll_sn,
    if(is_p2p, p2p_perf.p2p_msg_size_bytes, coll_perf.coll_msg_size_bytes) AS msg_size_bytes,
    if(is_p2p, p2p_perf.p2p_exec_time_us, coll_perf.coll_exec_time_us) AS exec_time_us,
    if(is_p2p, p2p_perf.p2p_timing_source, coll_perf.coll_timing_source) AS timing_source,
    '' AS algo,
    if(isFinite(algobw), algobw, NULL) AS algobw_gbs,
    if(isFinite(busbw), busbw, NULL) AS busbw_gbs,
    metadata.hostname AS hostname,
    toUInt32(metadata.pid) AS pid
FROM nccl_records
WHERE coll_perf.coll != '' OR is_p2p;
