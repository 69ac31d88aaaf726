-- NCCL Inspector records as Fluent Bit posts them from the nodes (one JSON object per line,
-- `INSERT INTO nccl_raw FORMAT JSONAsString`), turned into `collectives` rows on insert.
-- Record keys: NVIDIA/nccl plugins/profiler/inspector/inspector_json.cc (format v4.0);
-- reference/telemetry.md §1 and §3. Fluent Bit adds the pod's identity as top-level keys
-- (`cluster`, `namespace`, `team`, `job`, `run`, `pod`, `node`); the inspector's `hostname`
-- is the pod name in Kubernetes and stands in when `pod` is absent. `rank` is the rank
-- within the communicator, which is what the straggler analysis groups by.
-- NaN is written as the string "nan": toFloat64OrNull turns it into NULL.

CREATE TABLE IF NOT EXISTS nccl_raw
(
    json String
)
ENGINE = Null;

CREATE MATERIALIZED VIEW IF NOT EXISTS nccl_raw_to_collectives TO collectives AS
WITH
    JSONExtractRaw(json, 'header') AS header,
    JSONExtractRaw(json, 'metadata') AS meta,
    JSONHas(json, 'p2p_perf') AS is_p2p,
    JSONExtractRaw(json, if(is_p2p, 'p2p_perf', 'coll_perf')) AS perf,
    if(is_p2p, 'p2p_', 'coll_') AS p
SELECT
    fromUnixTimestamp64Micro(JSONExtractInt(meta, 'dump_timestamp_us'), 'UTC') AS ts,
    JSONExtractString(json, 'cluster') AS cluster,
    JSONExtractString(json, 'namespace') AS namespace,
    JSONExtractString(json, 'team') AS team,
    JSONExtractString(json, 'job') AS job,
    JSONExtractString(json, 'kind') AS kind,
    JSONExtractString(json, 'run') AS run,
    '' AS learner,
    -1 AS replica_group,
    toInt32(JSONExtractInt(header, 'rank')) AS rank,
    'worker' AS role,
    if(JSONHas(json, 'pod'), JSONExtractString(json, 'pod'),
       JSONExtractString(meta, 'hostname')) AS pod,
    JSONExtractString(json, 'node') AS node,
    'nccl_inspector' AS source,
    JSONExtractString(header, 'id') AS comm_id,
    if(JSONHas(header, 'comm_name'), JSONExtractString(header, 'comm_name'), 'unknown')
        AS comm_name,
    toUInt32(JSONExtractUInt(header, 'n_ranks')) AS n_ranks,
    toUInt32(JSONExtractUInt(header, 'nnodes')) AS nnodes,
    JSONExtractString(perf, if(is_p2p, 'p2p', 'coll')) AS coll,
    JSONExtractUInt(perf, concat(p, 'sn')) AS coll_sn,
    JSONExtractUInt(perf, concat(p, 'msg_size_bytes')) AS msg_size_bytes,
    toFloat64(JSONExtractFloat(perf, concat(p, 'exec_time_us'))) AS exec_time_us,
    JSONExtractString(perf, concat(p, 'timing_source')) AS timing_source,
    '' AS algo,
    toFloat64OrNull(JSONExtractRaw(perf, concat(p, 'algobw_gbs'))) AS algobw_gbs,
    toFloat64OrNull(JSONExtractRaw(perf, concat(p, 'busbw_gbs'))) AS busbw_gbs,
    JSONExtractString(meta, 'hostname') AS hostname,
    toUInt32(JSONExtractUInt(meta, 'pid')) AS pid
FROM nccl_raw
WHERE JSONHas(json, 'coll_perf') OR is_p2p;
