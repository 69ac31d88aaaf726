"""`gkr telemetry ingest` on hostile files: numbers outside their columns, deep nesting and a
record naming its own identity are file:line errors (or ignored, for the identity), never rows
stored as something else; a bad record stops the whole load before anything is written, as
every other bad line does (runtime/telemetry/ingest.py).

The ranges are the schema's (runtime/telemetry/columns.py parses the DDL); the first test
checks that parse against the engine's own `system.columns`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.telemetry import columns
from runtime.telemetry import flight_recorder as fr
from runtime.telemetry.inspector import MAX_DEPTH, InspectorError, parse_line
from runtime.telemetry.store import Store
from tests.cli.conftest import gkr
from tests.telemetry.test_inspector import EXAMPLE, _now, _write

INT32 = (-(2**31), 2**31 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
# Record fields, their column's range, as the view stores them (schema/0005).
FIELDS = {("header", "rank"): INT32, ("header", "n_ranks"): UINT32,
          ("header", "nnodes"): UINT32, ("metadata", "pid"): UINT32,
          ("coll_perf", "coll_sn"): UINT64, ("coll_perf", "coll_msg_size_bytes"): UINT64}
# dump_timestamp_us: the tables' TTL turns ts into a DateTime, 1970 to 2106-02-07 06:28:15.
TS_US = (0, 4294967295 * 10**6 + 0)


def _record(changes: dict[tuple[str, str], Any] | None = None) -> dict[str, Any]:
    record = json.loads(_now(EXAMPLE))
    for (section, name), value in (changes or {}).items():
        record[section][name] = value
    return record


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


def test_the_ddl_parse_is_the_engines(tmp_path: Path) -> None:
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        engine: dict[str, dict[str, str]] = {}
        for table, name, kind in store.query(
                "SELECT table, name, type FROM system.columns WHERE database = "
                "currentDatabase() AND table IN {tables:Array(String)}",
                {"tables": list(columns.schema_columns())}).rows:
            engine.setdefault(table, {})[name] = kind
    assert _canonical(columns.schema_columns()) == _canonical(engine)


def _canonical(tables: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Types without spaces: the engine writes `DateTime64(6, 'UTC')` as the DDL may not."""
    return {table: {name: kind.replace(" ", "") for name, kind in found.items()}
            for table, found in tables.items()}


@pytest.mark.parametrize(("field", "value"), [
    (("header", "rank"), 2**70), (("header", "rank"), 2**31),
    (("coll_perf", "coll_msg_size_bytes"), -1), (("coll_perf", "coll_sn"), 2**64),
    (("header", "n_ranks"), -8), (("metadata", "pid"), 2**32)])
def test_an_integer_outside_its_column_names_field_and_range(
        field: tuple[str, str], value: int) -> None:
    low, high = FIELDS[field]
    with pytest.raises(InspectorError) as refused:
        parse_line(_line(_record({field: value})), "f.log:3")
    assert str(refused.value).startswith(f"f.log:3: {field[0]}.{field[1]}: {value} is outside ")
    assert f"{low} to {high}" in str(refused.value)


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_any_integer_outside_any_column_is_refused(field: tuple[str, str],
                                                   data: st.DataObject) -> None:
    low, high = FIELDS[field]
    value = data.draw(st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1)))
    with pytest.raises(InspectorError, match=rf"^f\.log:1: .*{field[1]}: -?\d+ is outside"):
        parse_line(_line(_record({field: value})), "f.log:1")


@settings(max_examples=100, deadline=None)
@given(field=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_any_integer_inside_its_column_is_taken(field: tuple[str, str],
                                                data: st.DataObject) -> None:
    low, high = FIELDS[field]
    value = data.draw(st.integers(min_value=low, max_value=high))
    assert parse_line(_line(_record({field: value})), "f.log:1")[field[0]][field[1]] == value


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.integers(max_value=TS_US[0] - 1), st.integers(min_value=TS_US[1] + 1)))
def test_a_time_the_ttl_cannot_hold_is_refused(value: int) -> None:
    with pytest.raises(InspectorError, match=r"metadata\.dump_timestamp_us: .* is outside "
                                             r"collectives\.ts \(DateTime64\(6, 'UTC'\): 0 to "):
        parse_line(_line(_record({("metadata", "dump_timestamp_us"): value})), "f.log:1")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deep_nesting_is_a_line_error(depth: int) -> None:
    line = _line(_record())[:-1] + b', "extra": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(InspectorError, match=rf"^f\.log:7: nested deeper than {MAX_DEPTH} "):
        parse_line(line, "f.log:7")


def test_far_future_and_out_of_range_through_the_cli_write_nothing(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    good = _write(tmp_path / "w-0-pid1.log", _now(EXAMPLE))
    far = _line(_record({("metadata", "dump_timestamp_us"): 2**62})).decode()
    bad = _write(tmp_path / "w-1-pid2.log", _now(EXAMPLE), far)
    ran = gkr("telemetry", "ingest", "inspector", str(good), str(bad), "--run", "r",
              "--dsn", dsn)
    assert ran.code == 1 and "Traceback" not in ran.err
    assert ran.err.startswith(f"error: {bad}:2: metadata.dump_timestamp_us: {2**62} is outside "
                              "collectives.ts")
    with Store.connect(dsn) as store:
        assert store.query("SELECT count() FROM collectives").rows == [(0,)]


def test_the_command_lines_identity_wins(tmp_path: Path) -> None:
    """A record naming its own cluster, job, run or pod gets the load's: `--run` and nothing
    else (the pod falls back to the record's hostname, as for any file loaded here)."""
    dsn = f"chdb://{tmp_path / 'store'}"
    record = json.loads(_now(EXAMPLE)) | {"cluster": "forged", "job": "other-team-job",
                                          "namespace": "team-x", "team": "x", "run": "theirs",
                                          "pod": "someone-else", "node": "n", "kind": "k"}
    log = _write(tmp_path / "w-0-pid1.log", json.dumps(record))
    assert gkr("telemetry", "ingest", "inspector", str(log), "--run", "mine", "--dsn",
               dsn).code == 0
    with Store.connect(dsn) as store:
        assert store.query("SELECT cluster, namespace, team, job, kind, run, pod, node FROM "
                           "collectives").rows == [
            ("", "", "", "", "", "mine", "example-hostname", "")]


# --- Flight Recorder dumps ----------------------------------------------------------------

def _entry(**changes: Any) -> dict[str, Any]:
    return {"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"],
            "collective_seq_id": 1, "p2p_seq_id": 0, "op_id": 1,
            "profiling_name": "gloo:all_reduce", "time_created_ns": 1_700_000_000 * 10**9,
            "input_sizes": [[4]], "input_dtypes": ["Float"], "output_sizes": [[4]],
            "output_dtypes": ["Float"], "state": "completed", "time_discovered_started_ns": 0,
            "time_discovered_completed_ns": 0, "retired": True, "timeout_ms": 1000,
            "is_p2p": False, "duration_ms": None} | changes


def _dump(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": list(entries)}


@pytest.mark.parametrize(("field", "value"), [
    ("time_created_ns", 2**70), ("time_created_ns", -5), ("record_id", -1),
    ("collective_seq_id", 2**64), ("timeout_ms", -1), ("op_id", 2**80)])
def test_a_dump_value_outside_its_column_is_named(field: str, value: int) -> None:
    dump = fr.parse_dump(json.dumps(_dump(_entry(), _entry(**{field: value}))).encode(), 0,
                         "d/rank_0.json")
    with pytest.raises(fr.FlightRecorderError, match=rf"^d/rank_0\.json: entries\[1\]: "
                                                     rf"{field}: {value} is outside "):
        fr.rows(dump)


def test_a_time_beyond_the_ttl_is_named() -> None:
    dump = fr.parse_dump(json.dumps(_dump(_entry(time_created_ns=2**63))).encode(), 0, "d")
    with pytest.raises(fr.FlightRecorderError, match=r"^d: entries\[0\]: ts: 2262-.* is outside"
                                                     r" flight_recorder\.ts"):
        fr.rows(dump)


@settings(max_examples=100, deadline=None)
@given(field=st.sampled_from(["record_id", "collective_seq_id", "p2p_seq_id", "op_id",
                              "timeout_ms"]),
       value=st.one_of(st.integers(max_value=-1), st.integers(min_value=2**64)))
def test_any_out_of_range_dump_value_is_refused(field: str, value: int) -> None:
    dump = fr.parse_dump(json.dumps(_dump(_entry(**{field: value}))).encode(), 0, "d")
    with pytest.raises(fr.FlightRecorderError, match=rf"entries\[0\]: {field}: "):
        fr.rows(dump)


def test_a_rank_beyond_int32_in_the_file_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / f"{fr.PREFIX}{2**70}.json"
    path.write_text(json.dumps(_dump(_entry())))
    with pytest.raises(fr.FlightRecorderError, match=r"the rank in the file name: \d+ is outside"
                                                     r" flight_recorder\.rank \(Int32"):
        fr.read_dump(path)


@pytest.mark.parametrize("form", ["json", "pickle"])
def test_a_deep_dump_is_refused(form: str) -> None:
    depth = 100_000
    if form == "pickle":  # built with opcodes: pickle.dumps itself recurses per level
        marked = pickle.dumps(_dump(_entry(input_sizes="DEEP")), protocol=4)
        raw = marked.replace(b"\x8c\x04DEEP", b"(" * depth + b"]" + b"l" * depth)
    else:
        raw = (json.dumps(_dump(_entry()))[:-1] + ', "x": ' + "[" * depth + "]" * depth
               + "}").encode()
    with pytest.raises(fr.FlightRecorderError, match=r"^d: nested deeper than 32 levels"):
        fr.parse_dump(raw, 0, "d")


def test_a_bad_dump_through_the_cli_writes_nothing(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    folder = tmp_path / "fr"
    folder.mkdir()
    (folder / f"{fr.PREFIX}0.json").write_text(json.dumps(_dump(_entry())))
    (folder / f"{fr.PREFIX}1.json").write_text(json.dumps(_dump(_entry(record_id=-1))))
    ran = gkr("telemetry", "ingest", "flight-recorder", str(folder), "--run", "r", "--dsn", dsn)
    assert ran.code == 1 and "Traceback" not in ran.err
    assert ran.err.startswith(f"error: {folder / (fr.PREFIX + '1.json')}: entries[0]: "
                              "record_id: -1 is outside flight_recorder.record_id (UInt64: 0 to")
    with Store.connect(dsn) as store:
        assert store.query("SELECT count() FROM flight_recorder").rows == [(0,)]
