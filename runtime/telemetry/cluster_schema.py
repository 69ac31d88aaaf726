"""The schema on a sharded, replicated ClickHouse cluster (issue 27): the same migration files
as the embedded store's, each statement turned into its cluster form, so that the same
queries, under the same table names, read the whole cluster.

On a cluster (a server whose `{cluster}` macro is set, as the Altinity operator sets it for
the ClickHouseInstallation of generator/platform/telemetry.py), every statement runs
`ON CLUSTER '{cluster}'`, and

* a MergeTree-family table `t` becomes `t_local`, its Replicated form, one per shard, kept in
  step by ClickHouse Keeper (`/clickhouse/tables/{shard}/{database}/{table}`, `{replica}`),
  its TTL, ORDER BY and PARTITION BY as written; and `t` itself a Distributed table over the
  shards' `t_local`, sharded by `cityHash64(run)`: a run's rows all live on one shard;
* a Null table (what Fluent Bit and the loaders insert into) stays one, on every node;
* a materialized view reading a sharded table reads the shard's `t_local` and writes the
  shard's local target, so rollups are kept where their rows are (both are sharded by run);
  one reading a Null table writes the Distributed target, which routes each row to its run's
  shard;
* a view, an INSERT ... SELECT (the backfills) and the analysis queries read the Distributed
  tables, unchanged; `ALTER ... ADD COLUMN` alters both tables;
* `schema_migrations` is replicated on every node of every shard (its Keeper path has no
  shard), so any node knows what was applied.

QUERY_SETTINGS are the users' settings on such a cluster (the profiles of
generator/platform/telemetry.py): an IN or JOIN over a Distributed table inside a query over
one reads the shard's own local table, which is right because a run's rows are on one shard;
a query naming a run reads only that run's shard; and an insert returns once its rows are on
their shards, so that what was loaded is there to read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache

from runtime.telemetry import schema_files

CLUSTER = "'{cluster}'"  # the operator's macro: the cluster of the installation
LOCAL = "_local"
SHARDING_KEY = "cityHash64(run)"
REPLICA_PATH = "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"
EVERY_NODE_PATH = "'/clickhouse/tables/all/{database}/{table}', '{replica}'"
QUERY_SETTINGS: dict[str, int | str] = {
    "distributed_product_mode": "local",
    "optimize_skip_unused_shards": 1,
    "distributed_foreground_insert": 1,
}

_CREATE_TABLE = re.compile(
    r"^CREATE TABLE IF NOT EXISTS (\w+)\s*(\(.*?^\))\s*ENGINE = (\w+)(\((?:[^()]|\([^()]*\))*\))?"
    r"(.*)$", re.S | re.M)
_CREATE_VIEW = re.compile(r"^CREATE (MATERIALIZED VIEW|VIEW) IF NOT EXISTS (\w+)(.*)$", re.S)
_VIEW_TARGET = re.compile(r"^\s*TO (\w+)(.*)$", re.S)
_MODIFY_QUERY = re.compile(r"^ALTER TABLE (\w+) MODIFY QUERY(.*)$", re.S)
_ALTER = re.compile(r"^ALTER TABLE (\w+)(\s.*)$", re.S)
_SOURCE = re.compile(r"\b(FROM|JOIN)\s+(\w+)\b")


def engines(statements: Iterable[str]) -> dict[str, str]:
    """Every table the statements create, with its engine (`MergeTree`, `Null`, ...)."""
    found = (_CREATE_TABLE.match(statement) for statement in statements)
    return {m.group(1): m.group(3) for m in found if m}


@cache
def schema_engines() -> dict[str, str]:
    """The engines of the runtime's schema (runtime/telemetry/schema)."""
    return engines(statement for _, _, sql in schema_files.migrations()
                   for statement in schema_files.statements(sql))


def sharded(table: str, tables: Mapping[str, str]) -> bool:
    """Whether a table is sharded: every MergeTree-family table of the schema is."""
    return tables.get(table, "").endswith("MergeTree")


def statements(statement: str, tables: Mapping[str, str] | None = None) -> list[str]:
    """A schema statement's cluster form: one statement or, for a sharded table, two."""
    tables = schema_engines() if tables is None else tables
    table = _CREATE_TABLE.match(statement)
    if table:
        name, columns, engine, arguments, rest = table.groups()
        return _create_table(name, columns, engine, arguments, rest)
    view = _CREATE_VIEW.match(statement)
    if view:
        kind, name, rest = view.groups()
        return [_create_view(kind, name, rest, tables)]
    modify = _MODIFY_QUERY.match(statement)
    if modify:
        name, query = modify.groups()
        return [f"ALTER TABLE {name} ON CLUSTER {CLUSTER} MODIFY QUERY{_local(query, tables)}"]
    alter = _ALTER.match(statement)
    if alter:
        name, rest = alter.groups()
        names = [name + LOCAL, name] if sharded(name, tables) else [name]
        return [f"ALTER TABLE {each} ON CLUSTER {CLUSTER}{rest}" for each in names]
    return [statement]  # INSERT ... SELECT over the Distributed tables


def _create_table(name: str, columns: str, engine: str, arguments: str | None,
                  rest: str) -> list[str]:
    head = "CREATE TABLE IF NOT EXISTS"
    if not engine.endswith("MergeTree"):
        return [f"{head} {name} ON CLUSTER {CLUSTER} {columns} ENGINE = {engine}"
                f"{arguments or ''}{rest}"]
    inner = arguments[1:-1].strip() if arguments else ""
    replicated = f"Replicated{engine}({REPLICA_PATH}{', ' + inner if inner else ''})"
    return [f"{head} {name}{LOCAL} ON CLUSTER {CLUSTER} {columns} ENGINE = {replicated}{rest}",
            f"{head} {name} ON CLUSTER {CLUSTER} AS {name}{LOCAL} ENGINE = Distributed("
            f"{CLUSTER}, currentDatabase(), {name}{LOCAL}, {SHARDING_KEY})"]


def _create_view(kind: str, name: str, rest: str, tables: Mapping[str, str]) -> str:
    head = f"CREATE {kind} IF NOT EXISTS {name} ON CLUSTER {CLUSTER}"
    target = _VIEW_TARGET.match(rest)
    if kind == "VIEW" or target is None:
        return head + rest
    into, query = target.groups()
    if any(sharded(source, tables) for _, source in _SOURCE.findall(query)):
        return f"{head} TO {into}{LOCAL}{_local(query, tables)}"
    return f"{head} TO {into}{query}"


def _local(query: str, tables: Mapping[str, str]) -> str:
    """A materialized view's query reading the shard's local tables."""
    return _SOURCE.sub(lambda m: f"{m.group(1)} {m.group(2)}{LOCAL}"
                       if sharded(m.group(2), tables) else m.group(0), query)


def migrations_table() -> str:
    """`schema_migrations` on a cluster: replicated on every node."""
    return (f"CREATE TABLE IF NOT EXISTS schema_migrations ON CLUSTER {CLUSTER} (version "
            "UInt32, name String, applied_at DateTime DEFAULT now()) ENGINE = "
            f"ReplicatedReplacingMergeTree({EVERY_NODE_PATH}) ORDER BY version")
