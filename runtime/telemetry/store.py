"""The telemetry store: one client over ClickHouse, embedded or served; only the DSN differs.

* `chdb:///abs/folder` (the default, `.gkr/telemetry/` under the current directory): chDB,
  ClickHouse's engine inside this process, through clickhouse-connect's chDB backend. chDB
  lets one process hold a folder at a time (reference/telemetry.md §4), so a run writes
  through one process (`runtime.telemetry.sink`) and readers open, query and close.
* `http(s)://user@host:8123/database`: a ClickHouse server, as in a cluster.

The schema is the SQL files under `schema/`, applied in order by `migrate`, which records
what it applied and is safe to re-run; a recorded file whose tables are gone is applied again.
On a sharded, replicated server (its `{cluster}` macro set) each statement is applied in its
cluster form (runtime/telemetry/cluster_schema.py): the same tables under the same names,
Distributed over replicated local ones.

A store opened `read_only` (`gkr telemetry sql`, the diagnosis agent's skill) runs every
statement under the engine's `readonly = 1` and through `runtime.telemetry.readonly`'s checks;
writes (ingest, the writers, migrations) take the ordinary path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from runtime.errors import Category, RuntimeFailure
from runtime.identity import Env
from runtime.telemetry import cluster_schema, readonly
from runtime.telemetry.schema_files import migrations, statements

DATABASE = "telemetry"
DEFAULT_FOLDER = Path(".gkr") / "telemetry"
# What a schema file creates (its own fixed DDL form): re-applied when one is missing.
_CREATES = re.compile(r"^CREATE (?:TABLE|(?:MATERIALIZED )?VIEW) IF NOT EXISTS (\w+)", re.M)
MIGRATIONS_TABLE = ("CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, "
                    "applied_at DateTime DEFAULT now()) ENGINE = ReplacingMergeTree ORDER BY "
                    "version")


class StoreError(RuntimeFailure):
    """The store cannot be opened or a statement failed; says which store and why."""

    category = Category.SERVICE


class StoreBusy(StoreError):
    """Another process holds the embedded store's folder (chDB allows one at a time)."""


class QueryError(StoreError):
    """ClickHouse rejected a query: the message is the server's."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class Rows:
    """A query's result: column names and rows."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]

    def dicts(self) -> list[dict[str, Any]]:
        """One mapping per row."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def default_dsn(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> str:
    """`GKR_TELEMETRY_DSN` when set (rendered into cluster pods), else the local chDB folder."""
    env = os.environ if environ is None else environ
    if env.get(Env.TELEMETRY_DSN):
        return env[Env.TELEMETRY_DSN]
    return f"chdb://{((cwd or Path.cwd()) / DEFAULT_FOLDER).resolve()}"


def describe(dsn: str) -> str:
    """The DSN without its password, for messages."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


class Store:
    """Queries and inserts on one telemetry database."""

    def __init__(self, client: Any, dsn: str, cluster: str | None = None) -> None:
        self.client, self.dsn = client, dsn
        self.cluster = cluster  # the server's cluster (its `{cluster}` macro), if it has one
        self.read_only = False
        self._table_functions: list[str] | None = None

    @classmethod
    def connect(cls, dsn: str | None = None, migrate: bool = True,
                read_only: bool = False) -> Store:
        """Open the store (creating an embedded one's folder and database) and bring its
        schema up to date. `read_only`: then lock it to reading, in the engine. A server's
        schema is the writers' to migrate (its reader user could not), so a read-only store
        migrates only an embedded folder, the user's own."""
        dsn = dsn or default_dsn()
        migrate = migrate and (embedded(dsn) or not read_only)
        client = _client(dsn, create=migrate)
        store = cls(client, dsn, None if embedded(dsn) else _cluster(client))
        try:
            if migrate:
                store.migrate()
            if read_only:
                store._lock_read_only()
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Release the connection (and an embedded folder's lock)."""
        self.client.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def query(self, sql: str, parameters: Mapping[str, Any] | None = None) -> Rows:
        """Run one SELECT; `{name:Type}` placeholders take `parameters` (server-side binding).
        On a read-only store the statement run is the engine's own rendering of the one
        checked (`readonly.py`)."""
        if self.read_only:
            sql = self._checked(sql, parameters or {})
        return self._query(sql, parameters)

    def queries(self, *calls: tuple[str, Mapping[str, Any]]) -> list[Rows]:
        """Run SELECTs at once, each but the first on a connection of its own (closed after),
        so that the engine runs them side by side: one query leaves cores idle in its
        single-threaded steps, two fill them (the straggler analysis' two queries:
        benchmarks/telemetry.py). A connection may run one query at a time (chDB's handle, a
        server's session)."""
        if len(calls) < 2:
            return [self.query(sql, parameters) for sql, parameters in calls]
        siblings = [self._sibling() for _ in calls[1:]]
        try:
            with ThreadPoolExecutor(len(calls)) as pool:
                running = [pool.submit(store.query, sql, parameters)
                           for store, (sql, parameters) in zip([self, *siblings], calls,
                                                                strict=True)]
                return [future.result() for future in running]
        finally:
            for sibling in siblings:
                sibling.client.close()

    def _sibling(self) -> Store:
        """Another connection to this store's database, as locked as this one."""
        sibling = Store(_client(self.dsn, existing=True), self.dsn, self.cluster)
        if self.read_only:
            sibling._lock_read_only()
        return sibling

    def _query(self, sql: str, parameters: Mapping[str, Any] | None = None) -> Rows:
        with self._errors(sql):
            result = self.client.query(sql, parameters=dict(parameters or {}))
        return Rows(tuple(result.column_names), list(result.result_rows))

    def _lock_read_only(self) -> None:
        """`readonly = 1` on every statement of this client: SET on chDB's handle, a setting
        of every request on a server (clickhouse-connect's client settings). A server user
        whose profile is read-only already cannot send it (the value is not changeable) and
        needs none. Checked afterwards: the engine must say it is read-only."""
        current = self.client.server_settings.get("readonly")
        if current is None or current.value == "0":
            with self._errors("SET readonly = 1"):
                self.client.set_client_setting("readonly", "1")
        level = self._query("SELECT getSetting('readonly')").rows[0][0]
        if str(level) == "0":
            raise StoreError(f"telemetry store {describe(self.dsn)}: the engine did not take "
                             "readonly = 1; refusing to run queries on a writable connection")
        self.read_only = True

    def _explain_ast(self, sql: str, parameters: Mapping[str, Any]) -> list[str]:
        """EXPLAIN AST's lines, as TabSeparated text: a FORMAT clause after EXPLAIN AST
        belongs to the explained query (ParserExplainQuery), so the answer comes in the
        default format whatever a client appends; a raw query without one asks for that."""
        with self._errors(f"EXPLAIN AST {sql}"):
            body = self.client.raw_query(f"EXPLAIN AST {sql}", parameters=dict(parameters))
        return [readonly.tsv_field(line) for line in body.decode().splitlines()]

    def _checked(self, sql: str, parameters: Mapping[str, Any]) -> str:
        """The statement as the engine parsed it, refused if `readonly` would let it reach
        outside the store (readonly.py says what and why)."""
        single = self._query("SELECT formatQuery({statement:String})",
                             {"statement": sql}).rows[0][0]
        nodes = readonly.parse_ast(self._explain_ast(str(single), parameters))
        if self._table_functions is None:
            self._table_functions = [row[0] for row in self._query(
                "SELECT name FROM system.table_functions").rows]
        why = readonly.refusal(nodes, self._table_functions)
        if why:
            raise readonly.ReadOnlyRefused(f"telemetry store {describe(self.dsn)}: refused: "
                                           f"{why}")
        return str(single)

    def command(self, sql: str, parameters: Mapping[str, Any] | None = None,
                settings: Mapping[str, Any] | None = None) -> None:
        """Run one statement that returns no rows, with `settings` for it alone."""
        with self._errors(sql):
            self.client.command(sql, parameters=dict(parameters or {}),
                                settings=dict(settings or {}))

    def insert(self, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert rows given as mappings; the columns are the first row's keys."""
        if not rows:
            return
        columns = list(rows[0])
        data = [[row[column] for column in columns] for row in rows]
        with self._errors(f"INSERT INTO {table}"):
            self.client.insert(table, data, column_names=columns)

    def insert_arrow(self, table: str, arrow_table: Any) -> None:
        """Insert a pyarrow Table (the fast path for bulk loads)."""
        with self._errors(f"INSERT INTO {table}"):
            self.client.insert_arrow(table, arrow_table)

    def insert_raw(self, table: str, fmt: str, data: bytes,
                   settings: Mapping[str, Any] | None = None) -> None:
        """Insert a body in a ClickHouse input format, e.g. NDJSON as `JSONAsString`, with
        `settings` for this insert (its input format's, say)."""
        with self._errors(f"INSERT INTO {table} FORMAT {fmt}"):
            self.client.raw_insert(table, insert_block=data, fmt=fmt,
                                   settings=dict(settings or {}))

    def migrate(self) -> list[str]:
        """Apply the schema files not yet recorded, in order; the names applied now."""
        self.command(MIGRATIONS_TABLE if self.cluster is None else
                     cluster_schema.migrations_table())
        done = {row[0] for row in self.query("SELECT version FROM schema_migrations").rows}
        done -= self._incomplete(done)
        applied = []
        for version, name, sql in migrations():
            if version in done:
                continue
            for statement in self._forms(sql):
                self.command(statement)
            self.insert("schema_migrations", [{"version": version, "name": name}])
            applied.append(name)
        return applied

    def _forms(self, sql: str) -> list[str]:
        """A schema file's statements as this store runs them: as written, or each in its
        cluster form."""
        if self.cluster is None:
            return statements(sql)
        return [form for statement in statements(sql)
                for form in cluster_schema.statements(statement)]

    def _incomplete(self, done: set[int]) -> set[int]:
        """Recorded migrations from the first whose tables or views are gone on: applied
        again (every statement is idempotent), so a dropped table comes back, and the later
        files that alter it (0005 changes 0002's view) run after it."""
        existing = {row[0] for row in self.query(
            "SELECT name FROM system.tables WHERE database = currentDatabase()").rows}
        for version, _, sql in migrations():
            created = set(_CREATES.findall("\n".join(self._forms(sql))))
            if version in done and not created <= existing:
                return {v for v in done if v >= version}
        return set()

    @contextmanager
    def _errors(self, sql: str) -> Iterator[None]:
        try:
            yield
        except Exception as error:  # clickhouse-connect raises its own and chDB's errors
            raise _translate(error, self.dsn, sql) from error


def _client(dsn: str, create: bool = True, existing: bool = False) -> Any:
    """A clickhouse-connect client on the telemetry database (a server's created first when
    `create`, an embedded folder's unless it is known to be `existing`)."""
    import clickhouse_connect  # heavy: only the commands that use telemetry pay for it

    scheme = urlsplit(dsn).scheme
    try:
        if scheme == "chdb":
            if not existing:
                folder = Path(urlsplit(dsn).path)
                folder.mkdir(parents=True, exist_ok=True)
                bootstrap = clickhouse_connect.get_client(dsn=dsn)
                bootstrap.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
            return clickhouse_connect.get_client(dsn=dsn, database=DATABASE)
        if scheme in ("http", "https"):
            return _server_client(clickhouse_connect, dsn, create and not existing)
    except Exception as error:
        raise _translate(error, dsn, "connect") from error
    raise StoreError(
        f"telemetry DSN {describe(dsn)!r}: unknown scheme {scheme!r}; use chdb:///abs/folder "
        "(embedded) or http(s)://user@host:8123/database (a ClickHouse server)"
    )


def _server_client(clickhouse_connect: Any, dsn: str, create: bool) -> Any:
    """A client on the DSN's database (`telemetry` when the path names none).

    clickhouse-connect takes the database from the DSN's path and a server refuses a client
    whose database is absent, so a first connection creates it from the user's default
    database, as the chDB path does.
    """
    parts = urlsplit(dsn)
    database = unquote(parts.path.strip("/").split("/")[0]) or DATABASE
    if create:
        bootstrap = clickhouse_connect.get_client(dsn=parts._replace(path="").geturl())
        try:
            on_cluster = f" ON CLUSTER {cluster_schema.CLUSTER}" if _cluster(bootstrap) else ""
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS "
                              f"`{database.replace('`', '``')}`{on_cluster}")
        finally:
            bootstrap.close()
    return clickhouse_connect.get_client(dsn=dsn, database=database)


def _cluster(client: Any) -> str | None:
    """The server's cluster: its `{cluster}` macro, which the operator sets on every node of a
    ClickHouseInstallation; None for a server of its own."""
    found = client.query(
        "SELECT substitution FROM system.macros WHERE macro = 'cluster'").result_rows
    return str(found[0][0]) if found else None


def _translate(error: Exception, dsn: str, sql: str) -> StoreError:
    text = str(error)
    where = describe(dsn)
    if "AUTHENTICATION_FAILED" in text:
        user = urlsplit(dsn).username or "default"
        return StoreError(f"telemetry store {where}: the server refused user {user!r} "
                          "(wrong user or password); fix the DSN or "
                          f"{Env.TELEMETRY_DSN}")
    if "already initialized with path" in text:  # chDB: one folder per process, ever open
        return StoreBusy(
            f"telemetry store {where}: this process already has another chDB folder open "
            "(chDB opens one folder per process at a time); close that store first"
        )
    if "EmbeddedServer" in text or "Cannot lock file" in text:
        return StoreBusy(
            f"telemetry store {where} is open in another process (chDB allows one process per "
            "folder): wait for the run or `gkr ui` holding it to end, or set "
            f"{Env.TELEMETRY_DSN} to a ClickHouse server"
        )
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    if "(READONLY)" in text:  # Code 164: the engine's readonly refused it
        return QueryError(f"telemetry store {where}: {_server_message(text)}; this path "
                          "reads only (writes go through `gkr telemetry ingest`)")
    if "DB::Exception" in text or "Code:" in text:
        return QueryError(f"telemetry store {where}: {_server_message(text)}")
    return StoreError(f"telemetry store {where}: {sql.split()[0] if sql else ''}: {first}")


def _server_message(text: str) -> str:
    """ClickHouse's own message on one line: from `Code: N.` on, without the HTTP client's
    preamble and the `(version …)`/`(for url …)` trailers."""
    start = text.find("Code: ")
    message = re.sub(r"\s*\((?:version|for url) [^)]*\)", "", text[max(start, 0):])
    return " ".join(message.split())


def sql_file(name: str, package: str = "runtime.telemetry") -> str:
    """The text of one query file, `<package>/sql/<name>`: analyses live as plain SQL."""
    return (resources.files(package) / "sql" / name).read_text(encoding="utf-8")


def embedded(dsn: str) -> bool:
    """Whether the DSN names an embedded store, which one process at a time may open."""
    return urlsplit(dsn).scheme == "chdb"
