"""`gkr telemetry sql`, the diagnosis agent's SQL skill, reads and does nothing else: on a real
chDB store and on a ClickHouse HTTP server (the chDB-served double, with the reader's
read-only profile), hostile statements are refused by the engine's `readonly` or by the check
on the engine's own parse, and nothing they name is written, read or reached."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.crash import queries
from runtime.telemetry import readonly
from runtime.telemetry.store import QueryError, Store
from testing.doubles.clickhouse_http import ClickHouseHttpServer
from tests.cli.conftest import gkr
from tests.telemetry.test_inspector import EXAMPLE, _now

SECRET = "planted-secret-0b5e"  # a file's content that must never come back


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET + "\n")
    return path


@pytest.fixture
def dsn(tmp_path: Path) -> str:
    """A migrated store with one collective; closed, so that `gkr` can open it."""
    found = f"chdb://{tmp_path / 'store'}"
    with Store.connect(found) as store:
        store.insert_raw("nccl_raw", "JSONAsString", _now(EXAMPLE).encode())
    return found


def _hostile(secret: Path, out: Path) -> dict[str, str]:
    """Each class of statement the skill must not run, by name."""
    return {
        "drop": "DROP TABLE collectives",
        "truncate": "TRUNCATE TABLE collectives",
        "insert": "INSERT INTO collectives (run) VALUES ('forged')",
        "write a file": f"INSERT INTO FUNCTION file('{out}', 'LineAsString') SELECT 'x'",
        "outfile": f"SELECT 1 INTO OUTFILE '{out}'",
        "outfile of show": f"SHOW TABLES INTO OUTFILE '{out}'",
        "read a file": f"SELECT * FROM file('{secret}', 'LineAsString')",
        "scalar file": f"SELECT file('{secret}')",
        "quoted file": f"SELECT `file`('{secret}')",
        "described file": f"DESCRIBE TABLE file('{secret}', 'CSVWithNames')",
        "explained file": f"EXPLAIN SELECT file('{secret}')",
        "url": "SELECT * FROM url('http://127.0.0.1:9/x', 'LineAsString')",
        "s3": "SELECT * FROM s3('http://127.0.0.1:9/bucket/x', 'LineAsString')",
        "remote": "SELECT * FROM remote('127.0.0.1:9', system.one)",
        "cluster": "SELECT * FROM cluster('default', system.one)",
        "executable": "SELECT * FROM executable('id', 'LineAsString', 'x String')",
        "this process": "SELECT * FROM python(os)",
        "two statements": f"SELECT 1; SELECT file('{secret}')",
        "settings off": "SELECT 1 SETTINGS readonly = 0",
        "set": "SET readonly = 0",
        "temporary table": "CREATE TEMPORARY TABLE t (x UInt8)",
        "kill": "KILL QUERY WHERE 1",
        "optimize": "OPTIMIZE TABLE collectives FINAL",
    }


def _refused(store: Store, sql: str) -> str:
    with pytest.raises((readonly.ReadOnlyRefused, QueryError)) as refused:
        store.query(sql)
    return str(refused.value)


def _cases() -> list[str]:
    return list(_hostile(Path("s"), Path("o")))


@pytest.fixture
def read_only(dsn: str) -> Iterator[Store]:
    with Store.connect(dsn, read_only=True) as store:
        yield store


@pytest.mark.parametrize("case", _cases())
def test_each_hostile_statement_is_refused_and_changes_nothing(
        read_only: Store, secret: Path, tmp_path: Path, case: str) -> None:
    out = tmp_path / "written.txt"
    message = _refused(read_only, _hostile(secret, out)[case])
    assert SECRET not in message
    assert not out.exists()
    assert read_only.query("SELECT count() FROM collectives").rows == [(1,)]


def test_the_engine_refuses_writes_without_the_check(read_only: Store) -> None:
    """`readonly = 1` holds in the engine: the statement bypassing readonly.py's check is
    refused by ClickHouse itself (Code 164), and the table is still there."""
    assert read_only.query("SELECT getSetting('readonly')").rows == [(1,)]
    for sql in ("DROP TABLE collectives", "INSERT INTO collectives (run) VALUES ('x')",
                "SELECT * FROM file('/etc/hostname', 'LineAsString')", "SET readonly = 0"):
        with pytest.raises(QueryError, match=r"Code: 164\..*\(READONLY\)"):
            read_only._query(sql)
    assert read_only.query("EXISTS TABLE collectives").rows == [(1,)]


def test_drop_through_the_cli_is_one_error_line_and_the_table_stays(dsn: str) -> None:
    ran = gkr("telemetry", "sql", "DROP TABLE collectives", "--dsn", dsn)
    assert ran.code == 1 and ran.out == "" and "Traceback" not in ran.err
    assert ran.err.startswith(f"error: telemetry store {dsn}: refused: DropQuery is not a "
                              "read")
    assert json.loads(gkr("telemetry", "sql", "SELECT count() AS n FROM collectives", "-o",
                          "json", "--dsn", dsn).out) == [{"n": 1}]


def test_reads_still_work(read_only: Store) -> None:
    assert read_only.query("SELECT rank, coll FROM collectives WHERE n_ranks = {n:UInt32}",
                           {"n": 8}).rows == [(2, "AllReduce")]
    assert ("collectives",) in read_only.query("SHOW TABLES").rows
    assert read_only.query("-- a comment first\nSELECT sum(number) FROM numbers(4)").rows == [
        (6,)]
    assert read_only.query("DESCRIBE TABLE collectives").rows[0][:2] == (
        "ts", "DateTime64(6, 'UTC')")


def test_the_agents_bundle_queries_run_on_the_read_only_path(dsn: str) -> None:
    """The diagnosis prompt tells the agent to run these with `gkr telemetry sql`."""
    for listed in queries.listed("r1"):
        params = [arg for key, value in listed["parameters"].items()
                  for arg in ("-p", f"{key}={value}")]
        ran = gkr("telemetry", "sql", *params, "--dsn", dsn, "--", queries.sql(listed["name"]))
        assert ran.code == 0, (listed["name"], ran.err)


# Names the parser sees through: case of keywords, quoting, comments, whitespace, aliases.
_CALLS = st.sampled_from(["file", "`file`", "url", "`url`", "s3", "remote", "executable",
                          "python", "hdfs", "mysql", "postgresql", "sqlite", "azureBlobStorage",
                          "icebergLocal", "deltaLakeLocal", "fileCluster", "filesystem"])
_GAPS = st.sampled_from([" ", "\n", "\t", " /* x */ ", " -- c\n"])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=_CALLS, gap=_GAPS, select=st.sampled_from(["SELECT", "select", "SeLeCt"]),
       where=st.sampled_from(["from", "scalar", "subquery", "with"]))
def test_a_reaching_function_is_refused_however_it_is_written(
        read_only: Store, secret: Path, call: str, gap: str, select: str, where: str) -> None:
    args = f"('{secret}', 'LineAsString')"
    body = {"from": f"*{gap}FROM{gap}{call}{args}",
            "scalar": f"{call}{args}{gap}AS{gap}x",
            "subquery": f"*{gap}FROM{gap}collectives{gap}WHERE{gap}run{gap}IN{gap}"
                        f"(SELECT{gap}*{gap}FROM{gap}{call}{args})",
            "with": f"*{gap}FROM{gap}(WITH{gap}1{gap}AS{gap}a{gap}SELECT{gap}*{gap}FROM{gap}"
                    f"{call}{args})"}[where]
    sql = f"{select}{gap}{body}"
    try:
        rows = read_only.query(sql).rows
    except (readonly.ReadOnlyRefused, QueryError) as refused:
        assert SECRET not in str(refused)
    else:  # only a call the engine does not know may parse and still fail to be one
        pytest.fail(f"{sql!r} ran: {rows!r}")


def test_a_dropped_table_comes_back_on_the_next_connect(tmp_path: Path) -> None:
    """A recorded migration whose table is gone is applied again, and the view into it works:
    an NCCL Inspector line loads into the table recreated."""
    dsn = f"chdb://{tmp_path / 'store'}"
    with Store.connect(dsn) as store:
        store.command("DROP TABLE collectives")
        store.command("DROP TABLE nccl_raw_to_collectives")
    with Store.connect(dsn) as store:
        assert store.query("EXISTS TABLE collectives").rows == [(1,)]
        store.insert_raw("nccl_raw", "JSONAsString", _now(EXAMPLE).encode())
        assert store.query("SELECT rank, comm_name FROM collectives").rows == [(2, "DP Group 0")]
        assert store.migrate() == []  # nothing missing: nothing applied again


# --- the server ---------------------------------------------------------------------------

@pytest.fixture
def server(tmp_path: Path) -> Iterator[ClickHouseHttpServer]:
    """The double with the cluster's reader: its profile's readonly = 1
    (generator/platform/telemetry.py PROFILES)."""
    from generator.platform.telemetry import PROFILES, READER_PROFILE

    level = PROFILES[f"{READER_PROFILE}/readonly"]
    with ClickHouseHttpServer(tmp_path / "server", users={"default": "", "reader": "pw"},
                              readonly_users={"reader": level}) as running:
        with Store.connect(running.dsn(database="telemetry")) as store:  # as ingest migrates
            store.insert_raw("nccl_raw", "JSONAsString", _now(EXAMPLE).encode())
        yield running


@pytest.mark.parametrize("user", ["default", "reader"])
def test_on_a_server_the_skill_reads_only(server: ClickHouseHttpServer, secret: Path,
                                          tmp_path: Path, user: str) -> None:
    dsn = server.dsn(user, "pw" if user == "reader" else "", "telemetry")
    out = tmp_path / "written.txt"
    for case, sql in _hostile(secret, out).items():
        ran = gkr("telemetry", "sql", sql, "--dsn", dsn)
        assert ran.code == 1 and SECRET not in ran.out + ran.err, case
        assert "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1, case
    assert not out.exists()
    ran = gkr("telemetry", "sql", "SELECT count() AS n FROM collectives", "-o", "json",
              "--dsn", dsn)
    assert json.loads(ran.out) == [{"n": 1}]


def test_the_servers_reader_profile_refuses_as_clickhouse_does(
        server: ClickHouseHttpServer) -> None:
    """A write by the reader, bypassing gkr: HTTP 500 with the engine's Code 164 text (the
    status exceptionCodeToHTTPStatus.cpp gives an unlisted code); a setting it tries to
    change: refused the same way; a read: answered."""
    import urllib.error
    import urllib.request

    def post(sql: str, query: str = "") -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/?database=telemetry{query}", data=sql.encode(),
            headers={"X-ClickHouse-User": "reader", "X-ClickHouse-Key": "pw"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    status, text = post("DROP TABLE collectives")
    assert status == 500 and text.startswith("Code: 164. DB::Exception: ")
    assert "(READONLY)" in text
    status, text = post("SELECT 1", "&max_threads=1")
    assert status == 500 and "Cannot modify 'max_threads' setting in readonly mode" in text
    assert post("SELECT count() FROM collectives") == (200, "1\n")
