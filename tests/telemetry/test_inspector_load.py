"""NCCL Inspector logs read by the engine (runtime/telemetry/inspector_load.py): a bad record
stops the whole load with parse_line's file:line message and writes nothing, on an embedded
store and through a ClickHouse server's HTTP interface; the engine refuses what parse_line
refuses (ranges, nesting, UTF-8) but the two documented leniencies; and a record gives the
same row through the engine's reader as through `nccl_raw`'s string path and Fluent Bit's
request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from generator.telemetry import RECORDS_INSERT_SETTINGS, RECORDS_TABLE
from runtime.identity import Identity
from runtime.telemetry import inspector, inspector_load
from runtime.telemetry.inspector import MAX_DEPTH, InspectorError
from runtime.telemetry.store import Store
from testing.doubles.clickhouse_http import ClickHouseHttpServer
from tests.telemetry.test_ingest_limits import _line, _record
from tests.telemetry.test_inspector import EXAMPLE, P2P, _broken, _now, _write

GOOD = _now(EXAMPLE)


def _count(store: Store) -> int:
    return int(store.query("SELECT count() FROM collectives").rows[0][0])


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Store]:
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        yield store


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Store]:
    """The cluster path: a ClickHouse server's HTTP interface (the double runs chDB)."""
    with ClickHouseHttpServer(tmp_path / "server") as server, \
            Store.connect(server.dsn(database="telemetry")) as store:
        yield store


@pytest.fixture(params=["embedded", "served"])
def store(request: pytest.FixtureRequest) -> Store:
    return request.getfixturevalue(request.param)


def _refused(store: Store, paths: list[Path]) -> str:
    with pytest.raises(InspectorError) as refused:
        inspector_load.load(store, paths, Identity(run="r"))
    assert _count(store) == 0  # all or nothing: the good file before it is not written
    return str(refused.value)


@pytest.mark.parametrize(("line", "message"), [
    (EXAMPLE[:-1] + ',}', "not JSON: Expecting property name"),
    ('[1, 2]', "expected a JSON object, got list"),
    (_broken("header", "delete"), "header: expected an object, missing"),
    (_broken("header.rank", "delete"), "header.rank: expected an integer, missing"),
    (_broken("coll_perf.coll", "5"), "coll_perf.coll: expected a string, got 5"),
    (_broken("coll_perf.coll_busbw_gbs", '"fast"'),
     "coll_perf.coll_busbw_gbs: expected a number or \"nan\", got 'fast'"),
    (_broken("coll_perf.coll_exec_time_us", "true"),
     "coll_perf.coll_exec_time_us: expected a number or \"nan\", got True"),
    (_broken("metadata.inspector_output_format_version", '"v5.0"'),
     "metadata.inspector_output_format_version: 'v5.0' is not supported"),
    (_broken("coll_perf", "delete"), "no coll_perf, p2p_perf or dump_stats"),
    (_broken("header.rank", str(2**70)), f"header.rank: {2**70} is outside collectives.rank"),
    (_broken("coll_perf.coll_sn", str(2**64)), f"coll_perf.coll_sn: {2**64} is outside"),
    (_broken("coll_perf.coll_msg_size_bytes", "-1"), "coll_perf.coll_msg_size_bytes: -1 is "
                                                     "outside"),
    (_broken("metadata.pid", str(2**32)), f"metadata.pid: {2**32} is outside"),
    (_broken("metadata.dump_timestamp_us", str(2**62)), "metadata.dump_timestamp_us: "
                                                        f"{2**62} is outside collectives.ts"),
])
def test_a_bad_record_is_named_by_file_and_line_and_nothing_is_written(
        embedded: Store, tmp_path: Path, line: str, message: str) -> None:
    good = _write(tmp_path / "w-0-pid1.log", GOOD, GOOD)
    bad = _write(tmp_path / "w-1-pid2.log", GOOD, "", "  ", line, GOOD)  # blank lines count
    assert _refused(embedded, [good, bad]).startswith(f"{bad}:4: {message}")


def test_through_a_server_a_bad_record_is_named_and_nothing_is_written(
        served: Store, tmp_path: Path) -> None:
    """The files sent to the server, one body each: the reader's refusal (not JSON) and a
    check's (out of range) are named as on an embedded store."""
    good = _write(tmp_path / "w-0-pid1.log", GOOD, GOOD)
    for name, line, message in (
            ("w-1-pid2.log", EXAMPLE[:-1] + ',}', "not JSON: Expecting property name"),
            ("w-2-pid3.log", _broken("header.n_ranks", "-8"), "header.n_ranks: -8 is outside")):
        bad = _write(tmp_path / name, GOOD, "", line)
        assert _refused(served, [good, bad]).startswith(f"{bad}:3: {message}")
    assert [f.rows for f in inspector_load.load(served, [good])] == [2]


def test_nesting_is_refused_where_parse_line_refuses_it(embedded: Store,
                                                        tmp_path: Path) -> None:
    def nested(depth: int) -> str:
        return (_line(_record())[:-1] + b', "extra": ' + b"[" * depth + b"]" * depth
                + b"}").decode()

    deep = _write(tmp_path / "w-0-pid1.log", GOOD, nested(MAX_DEPTH))
    assert _refused(embedded, [deep]).startswith(f"{deep}:2: nested deeper than {MAX_DEPTH}")
    shallow = _write(tmp_path / "w-1-pid2.log", nested(MAX_DEPTH - 1))
    inspector.read_log(shallow)  # parse_line takes it, and so does the engine
    assert inspector_load.load(embedded, [shallow])[0].rows == 1


def test_a_string_that_is_not_utf8_is_refused(store: Store, tmp_path: Path) -> None:
    bad = tmp_path / "w-0-pid1.log"
    bad.write_bytes(GOOD.encode() + b"\n" + GOOD.replace("example-hostname", "host\xff")
                    .encode("latin-1") + b"\n")
    assert _refused(store, [bad]).startswith(f"{bad}:2: not UTF-8 text")


def test_what_the_engine_takes_that_parse_line_refuses(embedded: Store, tmp_path: Path) -> None:
    """The documented leniency: a number written as a string is read as the number."""
    quoted = _write(tmp_path / "w-0-pid1.log", _now(EXAMPLE, coll_sn="1407"))
    with pytest.raises(InspectorError, match="expected an integer, got '1407'"):
        inspector.read_log(quoted)
    assert inspector_load.load(embedded, [quoted])[0].rows == 1
    assert embedded.query("SELECT coll_sn FROM collectives").rows == [(1407,)]


def test_a_cut_off_last_line_is_left_out_and_reported(store: Store, tmp_path: Path) -> None:
    cut = _write(tmp_path / "w-0-pid1.log", GOOD, GOOD, GOOD[:57], end="")
    only = _write(tmp_path / "w-1-pid2.log", GOOD[:40], end="")
    empty = _write(tmp_path / "w-2-pid3.log", end="")
    loaded = inspector_load.load(store, [cut, only, empty], Identity(run="r"))
    assert [(f.rows, f.truncated) for f in loaded] == [(2, True), (0, True), (0, False)]
    assert _count(store) == 2


def test_files_named_like_globs_and_dump_stats(embedded: Store, tmp_path: Path) -> None:
    stats = json.loads(EXAMPLE)
    del stats["coll_perf"]
    stats["dump_stats"] = {"coll_records": 2, "coll_dropped_since_last_dump": 3,
                           "p2p_records": 0, "p2p_dropped_since_last_dump": 1}
    odd = _write(tmp_path / "w-{0,1}-pid*1.log", json.dumps(stats), GOOD, _now(P2P))
    other = _write(tmp_path / "w-2-pid2.log", GOOD)
    loaded = inspector_load.load(embedded, [odd, other], Identity(run="r"))
    assert [(f.path, f.rows, f.stats, f.dropped) for f in loaded] == [
        (odd, 2, 1, 4), (other, 1, 0, 0)]
    assert sorted(embedded.query("SELECT coll, run FROM collectives").rows) == [
        ("AllReduce", "r"), ("AllReduce", "r"), ("Send", "r")]


def _rows(store: Store) -> list[dict[str, Any]]:
    return store.query("SELECT * EXCEPT (run) FROM collectives ORDER BY coll_sn").dicts()


def test_every_path_gives_the_same_rows(tmp_path: Path) -> None:
    """The engine's load, Fluent Bit's request into `nccl_records` and the string path of
    `nccl_raw` give one row per record, the same."""
    verbose = _now(EXAMPLE, coll_sn=1408, event_trace_sn={"coll_start_sn": 1})
    infinite = _now(EXAMPLE, coll_sn=1409, coll_exec_time_us=0).replace(
        '"coll_algobw_gbs":277.210914', '"coll_algobw_gbs":inf')
    lines = [GOOD, _now(P2P), verbose, infinite]
    path = _write(tmp_path / "example-hostname-pid1639453.log", *lines)
    identity = {"cluster": "usc1", "job": "llm", "node": "gke-a3-1"}
    # As Fluent Bit posts them: the pod's identity added as top-level keys.
    posted = "\n".join(line[:-1] + "," + json.dumps(identity)[1:] for line in lines)
    # The string path needs the bare inf quoted (JSON has no inf): the old loader quoted it.
    quoted = posted.replace('"coll_algobw_gbs":inf', '"coll_algobw_gbs":"inf"')
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        inspector_load.load(store, [path], Identity(run="load", **identity))
        loaded = _rows(store)
        store.command("TRUNCATE TABLE collectives")
        store.insert_raw(RECORDS_TABLE, "JSONEachRow", posted.encode(),
                         settings=RECORDS_INSERT_SETTINGS)
        fluent = _rows(store)
        store.command("TRUNCATE TABLE collectives")
        store.insert_raw(inspector.RAW_TABLE, "JSONAsString", quoted.encode())
        raw = _rows(store)
    assert len(loaded) == 4 and loaded == fluent == raw


def test_fluent_bits_request_skips_a_line_it_cannot_type(embedded: Store) -> None:
    """One untypable line must not stop a node's records (Fluent Bit retries a refused
    request without limit)."""
    body = "\n".join([GOOD, _broken("header.rank", '"two"'), GOOD]).encode()
    embedded.insert_raw(RECORDS_TABLE, "JSONEachRow", body, settings=RECORDS_INSERT_SETTINGS)
    assert _count(embedded) == 2
