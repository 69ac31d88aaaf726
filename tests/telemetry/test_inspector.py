"""NCCL Inspector logs, in the plugin's exact format, loaded by the engine
(runtime/telemetry/inspector_load.py) through `nccl_records` and its view into `collectives`
rows on a real chDB store; the Python check of a line; and the errors a bad log gives."""

from __future__ import annotations

import copy
import json
import time
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from runtime.identity import Identity
from runtime.telemetry import inspector, inspector_load
from runtime.telemetry.inspector import InspectorError
from runtime.telemetry.store import Store

# The plugin README's example with v2.30's comm_name, byte for byte (reference/telemetry.md §1).
EXAMPLE = (
    '{"header":{"id":"0x7f8c496ae9f661","comm_name":"DP Group 0","rank":2,"n_ranks":8,'
    '"nnodes":1},"metadata":{"inspector_output_format_version":"v4.0","git_rev":"",'
    '"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1748030377748202,'
    '"hostname":"example-hostname","pid":1639453},"coll_perf":{"coll":"AllReduce",'
    '"coll_sn":1407,"coll_msg_size_bytes":17179869184,"coll_exec_time_us":61974,'
    '"coll_timing_source":"kernel_gpu","coll_algobw_gbs":277.210914,'
    '"coll_busbw_gbs":485.119099}}'
)
# A Send as v2.30.3+ writes it (inspector_json.cc, inspectorCompletedP2p), with a NaN
# bandwidth as json.cc writes one: the string "nan".
P2P = (
    '{"header":{"id":"0x7f8c496ae9f661","comm_name":"PP","rank":1,"n_ranks":2,"nnodes":2},'
    '"metadata":{"inspector_output_format_version":"v4.0","git_rev":"",'
    '"rec_mechanism":"nccl_profiler_interface","dump_timestamp_us":1748030377748999,'
    '"hostname":"example-hostname","pid":1639453},"p2p_perf":{"p2p":"Send","p2p_sn":12,'
    '"p2p_peer":0,"p2p_msg_size_bytes":1048576,"p2p_exec_time_us":40,'
    '"p2p_timing_source":"kernel_gpu","p2p_algobw_gbs":26.214400,"p2p_busbw_gbs":"nan"}}'
)
# Verbose mode (NCCL_INSPECTOR_DUMP_VERBOSE=1) adds event traces inside coll_perf.
VERBOSE = {"event_trace_sn": {"coll_start_sn": 1, "coll_stop_sn": 4, "kernel_events": [
    {"channel_id": 0, "kernel_start_sn": 2, "kernel_stop_sn": 3, "kernel_record_sn": 3}]},
    "event_trace_ts": {"coll_start_ts": 1748030377700000, "coll_stop_ts": 1748030377761974,
                       "kernel_events": [{"channel_id": 0, "kernel_start_ts": 1748030377700010,
                                          "kernel_stop_ts": 1748030377761970,
                                          "kernel_record_ts": 1748030377761971}]}}


def _now(line: str, **perf: Any) -> str:
    """The line with a current dump time (a 2025 one is past the table's 30-day TTL, which a
    background merge may apply at any time) and `perf` merged into its perf object."""
    record = json.loads(line)
    record["metadata"]["dump_timestamp_us"] = int(time.time() * 1e6)
    section = "coll_perf" if "coll_perf" in record else "p2p_perf"
    record[section].update(perf)
    return json.dumps(record, separators=(",", ":"))


def _write(path: Path, *lines: str, end: str = "\n") -> Path:
    path.write_bytes(("\n".join(lines) + end).encode())
    return path


def _load(tmp_path: Path, *paths: Path, identity: Identity | None = None
          ) -> list[dict[str, Any]]:
    """The files loaded as `gkr telemetry ingest` loads them; the `collectives` rows."""
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        loaded = inspector_load.load(store, paths, identity)
        rows = store.query("SELECT * FROM collectives ORDER BY coll_sn").dicts()
    assert sum(file.rows for file in loaded) == len(rows)
    return rows


def test_the_reference_record_reads_as_written(tmp_path: Path) -> None:
    log = inspector.read_log(_write(tmp_path / "example-hostname-pid1639453.log", EXAMPLE))
    assert [json.loads(line) for line in log.lines] == [json.loads(EXAMPLE)]
    assert (log.stats, log.dropped, log.truncated) == (0, 0, False)


def test_the_reference_record_becomes_one_collectives_row(tmp_path: Path) -> None:
    line = _now(EXAMPLE)
    path = _write(tmp_path / "example-hostname-pid1639453.log", line)
    [row] = _load(tmp_path, path, identity=Identity(run="r1", cluster="usc1"))
    stamp = json.loads(line)["metadata"]["dump_timestamp_us"]
    ts = row.pop("ts")  # the client gives the UTC column's value without a zone
    assert ts.replace(tzinfo=ts.tzinfo or UTC).timestamp() == pytest.approx(stamp / 1e6,
                                                                             abs=1e-6)
    assert row == {
        "cluster": "usc1", "namespace": "", "team": "", "job": "", "kind": "", "run": "r1",
        "learner": "", "replica_group": -1, "rank": 2, "role": "worker",
        "pod": "example-hostname", "node": "", "source": "nccl_inspector",
        "comm_id": "0x7f8c496ae9f661", "comm_name": "DP Group 0", "n_ranks": 8, "nnodes": 1,
        "coll": "AllReduce", "coll_sn": 1407, "msg_size_bytes": 17179869184,
        "exec_time_us": 61974.0, "timing_source": "kernel_gpu", "algo": "",
        "algobw_gbs": 277.210914, "busbw_gbs": 485.119099, "hostname": "example-hostname",
        "pid": 1639453}


def test_p2p_nan_inf_and_verbose_records(tmp_path: Path) -> None:
    verbose = _now(EXAMPLE, coll_sn=1408, **VERBOSE)
    # "%lf" of an infinite bandwidth (a zero-µs op) is a bare `inf`: not JSON, but the plugin's.
    infinite = _now(EXAMPLE, coll_sn=1409, coll_exec_time_us=0).replace(
        '"coll_algobw_gbs":277.210914', '"coll_algobw_gbs":inf')
    path = _write(tmp_path / "h-pid1.log", _now(P2P), verbose, infinite)
    send, full, zero = _load(tmp_path, path, identity=Identity(run="r"))
    assert (send["coll"], send["coll_sn"], send["msg_size_bytes"]) == ("Send", 12, 1048576)
    assert (send["comm_name"], send["rank"], send["n_ranks"], send["nnodes"]) == ("PP", 1, 2, 2)
    assert (send["algobw_gbs"], send["busbw_gbs"]) == (26.2144, None)  # "nan" -> NULL
    assert (full["exec_time_us"], full["busbw_gbs"]) == (61974.0, 485.119099)
    assert (zero["exec_time_us"], zero["algobw_gbs"]) == (0.0, None)  # inf -> NULL


def test_the_given_pod_wins_over_the_hostname(tmp_path: Path) -> None:
    path = _write(tmp_path / "h-pid1.log", _now(EXAMPLE))
    [row] = _load(tmp_path, path, identity=Identity(run="r", pod="trainer-w-0",
                                                    node="gke-a3-1", job="llm"))
    assert (row["pod"], row["node"], row["job"], row["hostname"]) == (
        "trainer-w-0", "gke-a3-1", "llm", "example-hostname")


def test_dump_stats_records_give_no_row_and_report_drops(tmp_path: Path) -> None:
    """Newer plugins (format v4.2) start each communicator's dump with a `dump_stats`
    record and add coll_algo/coll_proto to coll_perf."""
    stats = json.loads(EXAMPLE)
    del stats["coll_perf"]
    stats["metadata"]["inspector_output_format_version"] = "v4.2"
    stats["dump_stats"] = {"coll_records": 1, "coll_dropped_total": 9,
                           "coll_dropped_since_last_dump": 5, "p2p_records": 0,
                           "p2p_dropped_total": 2, "p2p_dropped_since_last_dump": 2}
    newer = _now(EXAMPLE, coll_algo="RING", coll_proto="SIMPLE")
    path = _write(tmp_path / "h-pid1.log", json.dumps(stats), newer)
    log = inspector.read_log(path)
    assert (len(log.lines), log.stats, log.dropped) == (1, 1, 7)
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        [loaded] = inspector_load.load(store, [path])
        [(coll,)] = store.query("SELECT coll FROM collectives").rows
    assert (loaded.rows, loaded.stats, loaded.dropped, coll) == (1, 1, 7, "AllReduce")


def test_an_unterminated_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "h-pid1.log", EXAMPLE, EXAMPLE[:57], end="")
    log = inspector.read_log(path)
    assert (len(log.lines), log.truncated) == (1, True)


def test_an_empty_log_gives_nothing(tmp_path: Path) -> None:
    path = tmp_path / "h-pid1.log"
    path.write_bytes(b"")  # the plugin opens its file at start, before any dump
    log = inspector.read_log(path)
    assert (log.lines, log.truncated) == ([], False)
    assert _load(tmp_path, path) == []


def _broken(path: str, change: str) -> str:
    """The example with one field (dotted path) removed or replaced."""
    record = copy.deepcopy(json.loads(EXAMPLE))
    *parents, last = path.split(".")
    target = record
    for key in parents:
        target = target[key]
    if change == "delete":
        del target[last]
    else:
        target[last] = json.loads(change)
    return json.dumps(record)


@pytest.mark.parametrize(("line", "message"), [
    (EXAMPLE[:-1] + ',}', r"h-pid1\.log:2: not JSON: Expecting property name"),
    ('[1, 2]', r"h-pid1\.log:2: expected a JSON object, got list"),
    ('{"x": NaN}', r"h-pid1\.log:2: not JSON: NaN is not JSON"),
    (_broken("header", "delete"), r"h-pid1\.log:2: header: expected an object, missing"),
    (_broken("coll_perf.coll_sn", '"1407"'),
     r"h-pid1\.log:2: coll_perf\.coll_sn: expected an integer, got '1407'"),
    (_broken("header.rank", "delete"), r"h-pid1\.log:2: header\.rank: expected an integer, "
                                       r"missing"),
    (_broken("coll_perf.coll_busbw_gbs", '"fast"'),
     r"h-pid1\.log:2: coll_perf\.coll_busbw_gbs: expected a number or \"nan\", got 'fast'"),
    (_broken("metadata.inspector_output_format_version", '"v5.0"'),
     r"h-pid1\.log:2: metadata\.inspector_output_format_version: 'v5\.0' is not supported"),
    (_broken("coll_perf", "delete"), r"h-pid1\.log:2: no coll_perf, p2p_perf or dump_stats"),
])
def test_a_malformed_line_is_named_by_file_line_and_field(tmp_path: Path, line: str,
                                                          message: str) -> None:
    path = _write(tmp_path / "h-pid1.log", EXAMPLE, line, EXAMPLE)
    with pytest.raises(InspectorError, match=message):
        inspector.read_log(path)


def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "h-pid1.log"
    path.write_bytes(EXAMPLE.encode() + b"\n\xff\xfe\x00binary\n")
    with pytest.raises(InspectorError, match=r"h-pid1\.log:2: not UTF-8 text \(byte 0\)"):
        inspector.read_log(path)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InspectorError, match=r"nope\.log: cannot read"):
        inspector.read_log(tmp_path / "nope.log")
