"""`gkr telemetry ingest` end to end, as a user runs it: files in, a per-file report out, the
rows in a real chDB store (queried afterwards), and bad input as one error line."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.telemetry.store import Store
from tests.cli.conftest import gkr, gkr_process
from tests.telemetry.test_flight_recorder import SKIPPED
from tests.telemetry.test_flight_recorder import gloo_dumps as gloo_dumps  # the fixture
from tests.telemetry.test_inspector import EXAMPLE, _now, _write


def _rank(rank: int, sn: int, exec_us: int) -> str:
    line = _now(EXAMPLE, coll_sn=sn, coll_exec_time_us=exec_us)
    return line.replace('"rank":2', f'"rank":{rank}').replace(
        "example-hostname", f"worker-{rank}")


def _logs(folder: Path) -> Path:
    """Two ranks' logs of one communicator, as two processes write them."""
    folder.mkdir()
    _write(folder / "worker-0-pid11.log", _rank(0, 1, 900), _rank(0, 2, 950))
    _write(folder / "worker-1-pid12.log", _rank(1, 1, 100), _rank(1, 2, 120))
    (folder / "notes.txt").write_text("not a log: a folder stands for its *.log files")
    return folder


def _query(dsn: str, sql: str) -> list[tuple]:
    with Store.connect(dsn) as store:
        return [tuple(row) for row in store.query(sql).rows]


def test_inspector_logs_load_and_are_queryable(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    logs = _logs(tmp_path / "nccl-inspector")
    done = gkr("telemetry", "ingest", "inspector", str(logs), "--run", "r7", "--dsn", dsn,
               "-o", "json")
    assert done.code == 0, done.err
    assert json.loads(done.out) == [
        {"file": str(logs / "worker-0-pid11.log"), "table": "collectives", "rows": 2,
         "note": ""},
        {"file": str(logs / "worker-1-pid12.log"), "table": "collectives", "rows": 2,
         "note": ""}]
    assert _query(dsn, "SELECT rank, pod, count(), avg(exec_time_us) FROM collectives "
                       "WHERE run = 'r7' GROUP BY rank, pod ORDER BY rank") == [
        (0, "worker-0", 2, 925.0), (1, "worker-1", 2, 110.0)]


def test_a_bad_file_is_one_error_line_and_nothing_is_written(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    good = _write(tmp_path / "worker-0-pid11.log", _rank(0, 1, 900))
    bad = _write(tmp_path / "worker-1-pid12.log", _rank(1, 1, 100), '{"header": 1}')
    done = gkr("telemetry", "ingest", "inspector", str(good), str(bad), "--run", "r",
               "--dsn", dsn)
    assert done.code == 1
    assert done.err == f"error: {bad}:2: header: expected an object, got 1\n"
    assert "Traceback" not in done.out + done.err
    assert _query(dsn, "SELECT count() FROM collectives") == [(0,)]


def test_usage_errors(tmp_path: Path) -> None:
    assert gkr("telemetry", "ingest", "nccl", str(tmp_path), "--run", "r").code == 2
    assert gkr("telemetry", "ingest", "inspector", str(tmp_path), "--run", " ").code == 2
    missing = gkr("telemetry", "ingest", "inspector", str(tmp_path / "nope"), "--run", "r",
                  "--dsn", f"chdb://{tmp_path / 'store'}")
    assert (missing.code, missing.err) == (1, f"error: {tmp_path / 'nope'}: no such file or "
                                              "folder\n")


def test_flight_recorder_dumps_load_with_the_analysis(gloo_dumps: Path, tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path / 'store'}"
    done = gkr_process("telemetry", "ingest", "flight-recorder", str(gloo_dumps / "pickle"),
                       "--run", "r9", "--dsn", dsn, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["FILE", "TABLE", "ROWS", "NOTE"]
    assert [line.split()[1:] for line in lines[1:]] == [
        ["flight_recorder", "4", "rank", "0"], ["flight_recorder", "3", "rank", "1"]]
    assert f"flight recorder: {SKIPPED}" in done.stderr.splitlines()
    assert _query(dsn, "SELECT rank, count() FROM flight_recorder WHERE run = 'r9' "
                       "GROUP BY rank ORDER BY rank") == [(0, 4), (1, 3)]
