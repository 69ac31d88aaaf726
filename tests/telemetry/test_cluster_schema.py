"""The schema on a sharded, replicated ClickHouse cluster (runtime/telemetry/cluster_schema.py):
every statement's cluster form is ClickHouse SQL (parsed by the engine behind the HTTP test
double), every table keeps its name, columns and TTL as a Distributed table over replicated
local ones sharded by run, rollups are kept on the shard of their rows, the analysis queries
name only what the cluster has under the same names, and a store on such a server applies
these forms. No ClickHouse cluster can run here (a server cannot be installed, and chDB has no
Keeper or remote shards): replication and Distributed queries themselves are not exercised."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from runtime.telemetry import cluster_schema
from runtime.telemetry.store import Store, migrations, statements
from testing.doubles.clickhouse_http import ClickHouseHttpServer

SCHEMA = [statement for _, _, sql in migrations() for statement in statements(sql)]
CLUSTER = [form for statement in SCHEMA for form in cluster_schema.statements(statement)]
TABLES = cluster_schema.schema_engines()
SHARDED = sorted(t for t in TABLES if cluster_schema.sharded(t, TABLES))


def _created(forms: list[str]) -> dict[str, str]:
    found = {}
    for form in forms:
        match = re.match(r"CREATE (?:TABLE|(?:MATERIALIZED )?VIEW) IF NOT EXISTS (\w+)", form)
        if match:
            found[match.group(1)] = form
    return found


CREATED = _created(CLUSTER)


def test_every_cluster_statement_is_clickhouse_sql(tmp_path: Path) -> None:
    """Each is parsed (EXPLAIN AST: parsed, not run) by the engine behind the HTTP interface."""
    with ClickHouseHttpServer(tmp_path / "chdb") as double, \
            Store.connect(double.dsn()) as server:
        for form in [cluster_schema.migrations_table(), *CLUSTER]:
            tree = server._explain_ast(form, {})
            assert tree[0].lstrip().startswith(("Create", "Alter", "Insert")), form[:80]


def test_each_sharded_table_is_distributed_over_replicated_local_tables() -> None:
    assert {"collectives", "collective_group_buckets", "train_steps"} <= set(SHARDED)
    embedded = _created(SCHEMA)
    for table in SHARDED:
        local, distributed = CREATED[f"{table}_local"], CREATED[table]
        assert "ON CLUSTER '{cluster}'" in local and "ENGINE = Replicated" in local
        assert "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'" in local
        assert re.search(r"\brun\b", local), f"{table} has no run to shard by"
        assert distributed.endswith(f"AS {table}_local ENGINE = Distributed('{{cluster}}', "
                                    f"currentDatabase(), {table}_local, cityHash64(run))")
        # Columns, ORDER BY, PARTITION BY and TTL as the embedded store's.
        def columns(form: str) -> str:
            return " ".join(form[form.index("("):form.index("ENGINE")].split())

        assert columns(local) == columns(embedded[table]), table
        ttl = re.search(r"\bTTL .*", embedded[table], re.S)
        assert (ttl is None) or local.endswith(ttl.group(0)), table


def test_null_tables_stay_null_on_every_node() -> None:
    for table in ("nccl_raw", "nccl_records", "sample_ledger_raw"):
        assert " ENGINE = Null" in CREATED[table] and f"{table}_local" not in CREATED
        assert f"CREATE TABLE IF NOT EXISTS {table} ON CLUSTER '{{cluster}}' (" in CREATED[table]


def test_rollups_are_kept_on_the_shard_of_their_rows() -> None:
    views = {name: form for name, form in CREATED.items() if "MATERIALIZED VIEW" in form}
    assert len(views) == 11
    for name, form in views.items():
        target = re.search(r" TO (\w+) AS", form).group(1)
        sources = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", form))
        if sources & {"nccl_raw", "nccl_records", "sample_ledger_raw"}:
            assert target in SHARDED, name  # the Distributed table routes rows by run
        else:
            assert target.endswith("_local") and sources <= {f"{t}_local" for t in SHARDED}


def test_altering_a_sharded_table_alters_both_and_backfills_read_the_cluster() -> None:
    added = [form for form in CLUSTER if "ADD COLUMN" in form]
    assert [form.split(" ON CLUSTER")[0] for form in added] == [
        "ALTER TABLE train_steps_local", "ALTER TABLE train_steps"]
    backfills = [form for form in CLUSTER if form.startswith("INSERT INTO")]
    assert backfills and all("_local" not in form for form in backfills)


def _query_tables(sql: str) -> set[str]:
    """The tables a query reads: after FROM or JOIN (not ARRAY JOIN), not its CTEs."""
    sql = re.sub(r"--.*$", "", sql, flags=re.M)
    names = set(re.findall(r"\b(?:FROM|(?<!ARRAY )JOIN)\s+(\w+)", sql))
    ctes = set(re.findall(r"^(?:WITH )?(\w+) AS\s*$", sql, re.M))
    return names - ctes - {"sample_ledger_raw"}


def test_the_queries_name_what_the_cluster_has_under_the_same_names() -> None:
    folder = resources.files("runtime.telemetry") / "sql"
    named = set()
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            named |= _query_tables(entry.read_text(encoding="utf-8"))
    assert {"collective_group_buckets", "comm_members", "rank_processes"} <= named
    assert not {name for name in named if name.endswith("_local")}
    assert named <= set(CREATED), sorted(named - set(CREATED))


class _RecordingClient:
    """A clickhouse-connect client of a clustered server: macros say `{cluster}` is main;
    statements are recorded, the migrations table and system.tables start empty."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def command(self, sql: str, **_: Any) -> None:
        self.statements.append(sql)

    def query(self, sql: str, **_: Any) -> Any:
        rows = [("main",)] if "system.macros" in sql else []
        return type("Result", (), {"column_names": ("value",), "result_rows": rows})()

    def insert(self, table: str, data: Any, column_names: Any) -> None:
        self.statements.append(f"INSERT INTO {table}")

    def close(self) -> None:
        pass


def test_a_store_on_a_cluster_applies_the_cluster_forms(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    client = _RecordingClient()
    monkeypatch.setattr("runtime.telemetry.store._client", lambda dsn, create=True: client)
    with Store.connect("http://ingest@clickhouse-telemetry.telemetry.svc:8123/telemetry") as store:
        assert store.cluster == "main"
    applied = [s for s in client.statements if not s.startswith("INSERT INTO schema_")]
    assert applied == [cluster_schema.migrations_table(), *CLUSTER]


def test_an_embedded_store_has_no_cluster(tmp_path: Path) -> None:
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        assert store.cluster is None
        assert "collectives_local" not in {row[0] for row in store.query("SHOW TABLES").rows}
