"""The cluster path of the telemetry store: `Store.connect("http://user:pw@host:8123/db")`
through clickhouse-connect's HTTP client, against the ClickHouse HTTP test double
(testing/doubles/clickhouse_http.py; no ClickHouse server can be installed here)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.identity import Identity
from runtime.telemetry.store import QueryError, Store, StoreError, migrations
from runtime.telemetry.writer import StoreSink, TelemetryWriter
from testing.doubles.clickhouse_http import DECOMPRESS, ClickHouseHttpServer

USER, PASSWORD = "gkr", "s3cret-pw"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ClickHouseHttpServer]:
    with ClickHouseHttpServer(tmp_path / "server", {USER: PASSWORD}) as double:
        yield double


def _databases(server: ClickHouseHttpServer) -> set[str]:
    with Store(_raw_client(server), "raw") as store:
        return {row[0] for row in store.query("SELECT name FROM system.databases").rows}


def _raw_client(server: ClickHouseHttpServer) -> object:
    import clickhouse_connect

    return clickhouse_connect.get_client(dsn=server.dsn(USER, PASSWORD))


def test_connect_creates_the_database_of_the_dsn_and_migrates_it(server) -> None:
    dsn = server.dsn(USER, PASSWORD, "telemetry_ci")
    assert "telemetry_ci" not in _databases(server)
    with Store.connect(dsn) as store:
        tables = {row[0] for row in store.query("SHOW TABLES").rows}
        applied = [row[0] for row in store.query(
            "SELECT name FROM schema_migrations ORDER BY version").rows]
    assert {"train_steps", "collectives", "events", "schema_migrations"} <= tables
    assert applied == [name for _, name, _ in migrations()]
    assert "telemetry_ci" in _databases(server)
    # clickhouse-connect sends the DSN's path as the `database` parameter of each query.
    show = next(call for call in server.calls if call.body.startswith(b"SHOW TABLES"))
    assert show.params["database"] == "telemetry_ci"


def test_rerunning_the_migrations_changes_nothing(server) -> None:
    dsn = server.dsn(USER, PASSWORD, "telemetry")
    Store.connect(dsn).close()
    with Store.connect(dsn) as store:
        assert store.migrate() == []
        count = store.query("SELECT count() FROM schema_migrations FINAL").rows[0][0]
    assert count == len(migrations())


def test_rows_written_through_the_writer_come_back(server) -> None:
    dsn = server.dsn(USER, PASSWORD, "telemetry")
    Store.connect(dsn).close()
    writer = TelemetryWriter(StoreSink(dsn), Identity(run="r1", rank=3, pod="p-3", node="n-1"),
                             interval_s=0.05)
    for step in range(1, 6):
        writer.write("train_steps", {"step": step, "loss": 1.0 / step, "step_time_s": 0.1,
                                     "samples_per_s": 10.0, "tokens_per_s": 10.0})
    writer.close()
    assert writer.written == 5 and writer.dropped == 0
    with Store.connect(dsn, migrate=False) as store:
        rows = store.query("SELECT step, loss, rank, pod, node FROM train_steps "
                           "WHERE run = {run:String} ORDER BY step", {"run": "r1"}).rows
    assert rows == [(step, 1.0 / step, 3, "p-3", "n-1") for step in range(1, 6)]
    inserts = [call for call in server.calls if b"INSERT INTO" in call.body[:200]
               or "INSERT INTO" in call.params.get("query", "")]
    # The client compresses its Native inserts (lz4 when installed); the double read them
    # through Content-Encoding.
    assert any(call.headers.get("content-encoding") in DECOMPRESS for call in inserts)


def test_a_wrong_password_names_the_store_but_not_the_password(server) -> None:
    dsn = server.dsn(USER, "wrong-pw", "telemetry")
    with pytest.raises(StoreError) as raised:
        Store.connect(dsn)
    message = str(raised.value)
    assert not isinstance(raised.value, QueryError)
    assert f"http://{USER}:***@127.0.0.1:{server.port}/telemetry" in message
    assert "wrong-pw" not in message and "refused user 'gkr'" in message


def test_a_query_error_carries_clickhouses_message(server) -> None:
    with Store.connect(server.dsn(USER, PASSWORD, "telemetry")) as store, \
            pytest.raises(QueryError) as raised:
        store.query("SELECT nope FROM collectives")
    message = str(raised.value)
    assert "Code: 47. DB::Exception:" in message and "(UNKNOWN_IDENTIFIER)" in message
    assert "\n" not in message and "(version" not in message and PASSWORD not in message
