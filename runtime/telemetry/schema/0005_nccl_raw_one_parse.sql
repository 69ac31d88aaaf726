-- NCCL Inspector records parsed once per record (issue 15). The view of 0002 called a JSON
-- function per field, each parsing its object again: about 14 µs of CPU a record, 30-70
-- thousand records a second on two cores (benchmarks/fleet/stragglers.py), where a fleet of
-- 10,000 GPUs posts an hour's records at several times that. One JSONExtract into a named
-- tuple parses the record once. The rows are the same as 0002's: a key that is absent gives
-- the type's default, as JSONExtract* did; `comm_name` and `pod` are Nullable to tell absent
-- from empty; "nan" and "inf" bandwidths (the plugin's NaN; a bare inf, quoted by
-- runtime/telemetry/inspector.py) are stored as NULL, as 0002's toFloat64OrNull stored them.
-- MODIFY QUERY swaps the view's SELECT in place, so no record posted meanwhile is lost or
-- written twice, and running it again changes nothing.

ALTER TABLE nccl_raw_to_collectives MODIFY QUERY
WITH
    JSONExtract(json, 'Tuple(
        header Tuple(id String, comm_name Nullable(String), rank Int64, n_ranks UInt64,
                     nnodes UInt64),
        metadata Tuple(dump_timestamp_us Int64, hostname String, pid UInt64),
        coll_perf Tuple(coll String, coll_sn UInt64, coll_msg_size_bytes UInt64,
                        coll_exec_time_us Float64, coll_timing_source String,
                        coll_algobw_gbs Float64, coll_busbw_gbs Float64),
        p2p_perf Tuple(p2p String, p2p_sn UInt64, p2p_msg_size_bytes UInt64,
                       p2p_exec_time_us Float64, p2p_timing_source String,
                       p2p_algobw_gbs Float64, p2p_busbw_gbs Float64),
        cluster String, namespace String, team String, job String, kind String, run String,
        pod Nullable(String), node String)') AS record,
    record.p2p_perf.p2p != '' AS is_p2p,
    if(is_p2p, record.p2p_perf.p2p_algobw_gbs, record.coll_perf.coll_algobw_gbs) AS algobw,
    if(is_p2p, record.p2p_perf.p2p_busbw_gbs, record.coll_perf.coll_busbw_gbs) AS busbw
SELECT
    fromUnixTimestamp64Micro(record.metadata.dump_timestamp_us, 'UTC') AS ts,
    record.cluster AS cluster,
    record.namespace AS namespace,
    record.team AS team,
    record.job AS job,
    record.kind AS kind,
    record.run AS run,
    '' AS learner,
    -1 AS replica_group,
    toInt32(record.header.rank) AS rank,
    'worker' AS role,
    ifNull(record.pod, record.metadata.hostname) AS pod,
    record.node AS node,
    'nccl_inspector' AS source,
    record.header.id AS comm_id,
    ifNull(record.header.comm_name, 'unknown') AS comm_name,
    toUInt32(record.header.n_ranks) AS n_ranks,
    toUInt32(record.header.nnodes) AS nnodes,
    if(is_p2p, record.p2p_perf.p2p, record.coll_perf.coll) AS coll,
    if(is_p2p, record.p2p_perf.p2p_sn, record.coll_perf.coll_sn) AS coll_sn,
    if(is_p2p, record.p2p_perf.p2p_msg_size_bytes, record.coll_perf.coll_msg_size_bytes)
        AS msg_size_bytes,
    if(is_p2p, record.p2p_perf.p2p_exec_time_us, record.coll_perf.coll_exec_time_us)
        AS exec_time_us,
    if(is_p2p, record.p2p_perf.p2p_timing_source, record.coll_perf.coll_timing_source)
        AS timing_source,
    '' AS algo,
    if(isFinite(algobw), algobw, NULL) AS algobw_gbs,
    if(isFinite(busbw), busbw, NULL) AS busbw_gbs,
    record.metadata.hostname AS hostname,
    toUInt32(record.metadata.pid) AS pid
FROM nccl_raw
WHERE record.coll_perf.coll != '' OR is_p2p;
