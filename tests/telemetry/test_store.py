"""The embedded store (chDB in a folder): migrations, the identity on every table, one process
per folder, and a writer that never blocks the training thread."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from runtime.identity import Identity
from runtime.telemetry.store import Store, migrations, statements
from runtime.telemetry.writer import Row, TelemetryWriter, utc_now

# Tables that hold no rows of their own: the inspector records (Null engines whose
# materialized views write `collectives`, identity included), the views, and the migrations'
# record.
NOT_ROWS = {"nccl_raw", "nccl_raw_to_collectives", "nccl_records", "nccl_records_to_collectives",
            "collectives_to_buckets", "collective_buckets_to_groups",
            "collective_samples", "schema_migrations", "train_steps_to_members",
            "collectives_to_members", "fleet_summaries_to_members", "events_to_members",
            "train_steps_to_totals", "collectives_to_comm_members"}
# Sums of other tables' rows (migrations 0003, 0004, 0006, 0010): they keep the keys that join
# them.
DERIVED = {"collective_buckets": ("run", "rank", "pod", "node"),
           "collective_group_buckets": ("run",),
           "run_members": ("run", "role", "rank", "pod", "node"), "train_step_totals": ("run",),
           "comm_members": ("run", "rank", "pod", "node")}
IDENTITY_TYPES = {"replica_group": "Int32", "rank": "Int32"}  # the others: LowCardinality


def migrate_until(store: Store, last: int) -> None:
    """Bring a new store to schema version `last`, as a store made before the later files."""
    store.command("CREATE TABLE schema_migrations (version UInt32, name String, applied_at "
                  "DateTime DEFAULT now()) ENGINE = ReplacingMergeTree ORDER BY version")
    for version, name, sql in migrations():
        if version <= last:
            for statement in statements(sql):
                store.command(statement)
            store.insert("schema_migrations", [{"version": version, "name": name}])


def _dsn(tmp_path: Path) -> str:
    return f"chdb://{tmp_path / 'telemetry'}"


def _recorded(store: Store) -> list[tuple[int, str]]:
    return [tuple(row) for row in store.query(
        "SELECT version, name FROM schema_migrations FINAL ORDER BY version").rows]


def test_migrations_apply_in_order_and_are_recorded(tmp_path) -> None:
    files = migrations()
    assert [version for version, _, _ in files] == sorted({v for v, _, _ in files})
    with Store.connect(_dsn(tmp_path), migrate=False) as store:
        applied = store.migrate()
        assert applied == [name for _, name, _ in files]
        assert _recorded(store) == [(version, name) for version, name, _ in files]
        assert store.migrate() == []  # a second run applies nothing
        assert len(_recorded(store)) == len(files)
    with Store.connect(_dsn(tmp_path)) as store:  # and so does reopening
        assert len(_recorded(store)) == len(files)


def test_a_half_applied_migration_runs_again_safely(tmp_path) -> None:
    version, name, _ = migrations()[0]
    with Store.connect(_dsn(tmp_path), migrate=False) as store:
        store.migrate()
        store.command("DELETE FROM schema_migrations WHERE version = {v:UInt32}", {"v": version})
        store.command("OPTIMIZE TABLE schema_migrations FINAL")
        assert (version, name) not in _recorded(store)  # applied, not recorded: a crash
        store.insert("events", [{"ts": utc_now(), "reason": "kept", "message": "written before"}])
        assert store.migrate() == [name]
        assert (version, name) in _recorded(store)
        assert store.query("SELECT count() FROM events").rows == [(1,)]  # nothing recreated


def test_every_statement_of_every_migration_can_run_twice(tmp_path) -> None:
    with Store.connect(_dsn(tmp_path)) as store:
        for _, _, sql in migrations():
            for statement in statements(sql):
                store.command(statement)


def test_every_table_carries_the_identity(tmp_path) -> None:
    fields = [field.name for field in dataclasses.fields(Identity)]
    with Store.connect(_dsn(tmp_path)) as store:
        tables = [row[0] for row in store.query("SHOW TABLES").rows]
        assert "collectives" in tables and "train_steps" in tables
        for table in set(tables) - NOT_ROWS:
            columns = dict(store.query(
                "SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                "AND table = {t:String}", {"t": table}).rows)
            if table in DERIVED:
                assert set(DERIVED[table]) <= set(columns), table
                continue
            for field in fields:
                expected = IDENTITY_TYPES.get(field, "LowCardinality(String)")
                assert columns.get(field) == expected, f"{table}.{field}"


def test_a_second_process_on_the_folder_is_told_the_store_is_busy(tmp_path) -> None:
    dsn = _dsn(tmp_path)
    script = ("import sys\nfrom runtime.telemetry.store import Store, StoreBusy\n"
              "try:\n    Store.connect(sys.argv[1])\n"
              "except StoreBusy as error:\n    print(error)\n    sys.exit(3)\n")
    with Store.connect(dsn):
        second = subprocess.run([sys.executable, "-c", script, dsn], capture_output=True,
                                text=True, timeout=300, check=False)
    assert second.returncode == 3, second.stderr
    assert f"telemetry store {dsn} is open in another process" in second.stdout
    assert "chDB allows one process per folder" in second.stdout
    with Store.connect(dsn) as store:  # released: the folder opens again
        assert store.query("SELECT 1").rows == [(1,)]


class GatedSink:
    """A sink that blocks every insert until `release()`, then writes to a real store."""

    def __init__(self, store: Store | None = None) -> None:
        self.store, self.inserted = store, []  # type: ignore[var-annotated]
        self.entered, self.gate = threading.Event(), threading.Event()
        self.converted_on: list[str] = []

    def insert(self, table: str, rows: list[Row]) -> None:
        self.entered.set()
        self.gate.wait()
        self.inserted.extend((table, row) for row in rows)
        if self.store is not None:
            self.store.insert(table, rows)

    def release(self) -> None:
        self.gate.set()


def _write_all(writer: TelemetryWriter, count: int) -> None:
    """The training thread: `count` writes; the test fails if any of them blocks."""
    thread = threading.Thread(target=lambda: [
        writer.write("events", {"reason": "Step", "message": str(i)}) for i in range(count)])
    thread.start()
    thread.join(timeout=120)  # a bound for a liveness check, not a timing claim
    assert not thread.is_alive(), "TelemetryWriter.write blocked on a stuck sink"


def test_a_stuck_sink_never_blocks_write_and_every_drop_is_counted(tmp_path) -> None:
    capacity = 100
    sink = GatedSink()
    writer = TelemetryWriter(sink, Identity(run="r"), capacity=capacity, batch_rows=1)
    writer.write("events", {"reason": "First", "message": ""})
    assert sink.entered.wait(60)  # the drain thread holds that one row, stuck in insert
    _write_all(writer, 10 * capacity)
    assert writer.dropped == 10 * capacity - capacity  # exactly what did not fit
    sink.release()
    writer.close()
    assert writer.written == 1 + capacity + 1  # and the event that reports the drops
    assert sink.inserted[-1][1]["count"] == writer.dropped


def test_drops_are_reported_as_an_event_once_the_sink_recovers(tmp_path) -> None:
    with Store.connect(_dsn(tmp_path)) as store:
        sink = GatedSink(store)
        writer = TelemetryWriter(sink, Identity(run="r-drops", rank=2), capacity=50,
                                 batch_rows=1)
        writer.write("events", {"reason": "First", "message": ""})
        assert sink.entered.wait(60)
        _write_all(writer, 500)
        sink.release()
        writer.close()
        rows = store.query("SELECT count, message, rank FROM events WHERE run = 'r-drops' "
                           "AND reason = 'RowsDropped'").rows
    assert rows == [(450, "450 telemetry rows dropped; 51 written", 2)]


class ProbeScalar:
    """A 0-d tensor's interface (`ndim`, `item()`), noting the thread that reads it."""

    ndim = 0

    def __init__(self, value: float, seen: list[str]) -> None:
        self.value, self.seen = value, seen

    def item(self) -> float:
        self.seen.append(threading.current_thread().name)
        return self.value


def test_tensors_are_read_off_the_training_thread(tmp_path) -> None:
    import torch

    seen: list[str] = []
    sink = GatedSink()
    sink.release()
    writer = TelemetryWriter(sink, Identity(run="r"), interval_s=0.05)
    writer.write("train_steps", {"step": 1, "loss": torch.tensor(0.25)})
    writer.write("train_steps", {"step": 2, "loss": ProbeScalar(0.5, seen)})
    writer.close()
    losses: list[Any] = [row["loss"] for _, row in sink.inserted]
    assert losses == [0.25, 0.5] and all(type(loss) is float for loss in losses)
    assert seen == ["gkr-telemetry"]  # the writer's thread, not the caller's


def _steps(run: str, ranks: int, steps: range) -> list[Row]:
    return [{"ts": utc_now(), "run": run, "role": "worker", "rank": rank, "pod": f"p-{rank}",
             "node": f"n-{rank // 2}", "cluster": "c1", "step": step, "loss": 1.0 / (step + 1),
             "step_time_s": 0.1 * (rank + 1), "samples_per_s": 8.0, "tokens_per_s": 8.0 * 512}
            for step in steps for rank in range(ranks)]


def _rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Sums in another order differ in the last bits."""
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in rows]


ROLLUPS = {  # each rollup query, and the same figures straight from the rows
    "SELECT role, rank, pod, node, any(cluster), min(first_ts), max(last_ts), max(last_step) "
    "FROM run_members WHERE run = 'r' AND source_table = 'train_steps' "
    "GROUP BY role, rank, pod, node ORDER BY rank":
    "SELECT role, rank, pod, node, any(cluster), min(ts), max(ts), max(step) FROM train_steps "
    "WHERE run = 'r' GROUP BY role, rank, pod, node ORDER BY rank",
    "SELECT step, sum(rows), sum(loss_sum), min(loss_min), max(loss_max), "
    "sum(samples_per_s_sum), sum(step_time_s_sum), max(step_time_s_max) FROM train_step_totals "
    "WHERE run = 'r' GROUP BY step ORDER BY step":
    "SELECT step, count(), sum(loss), min(loss), max(loss), sum(samples_per_s), "
    "sum(step_time_s), max(step_time_s) FROM train_steps WHERE run = 'r' GROUP BY step "
    "ORDER BY step",
}


def test_rollups_agree_with_the_rows_backfilled_or_filled_on_insert(tmp_path) -> None:
    with Store.connect(_dsn(tmp_path), migrate=False) as store:
        migrate_until(store, 3)
        store.insert("train_steps", _steps("r", 4, range(0, 5)))  # before the rollups
        assert "0004_run_rollups.sql" in store.migrate()  # backfilled here
        for start in (5, 8):  # then filled on insert, in several parts
            store.insert("train_steps", _steps("r", 4, range(start, start + 3)))
        for rollup, rows in ROLLUPS.items():
            expected = store.query(rows).rows
            assert len(expected) in (4, 11)
            assert _rounded(store.query(rollup).rows) == _rounded(expected)
        store.command("DELETE FROM schema_migrations WHERE version = 4")
        store.migrate()  # a re-run backfills nothing twice
        for rollup, rows in ROLLUPS.items():
            assert _rounded(store.query(rollup).rows) == _rounded(store.query(rows).rows)


def test_queries_run_side_by_side_on_connections_locked_alike(tmp_path) -> None:
    """Store.queries gives what one query after another gives; its extra connections are as
    read-only as the store's."""
    with Store.connect(_dsn(tmp_path)) as store:
        store.insert("events", [{"ts": utc_now(), **Identity(run="r", rank=r).row(),
                                 "source": "test", "message": "m"} for r in range(3)])
    calls = (("SELECT count() FROM events", {}),
             ("SELECT groupArray(rank) FROM (SELECT rank FROM events ORDER BY rank)", {}),
             ("SELECT getSetting('readonly')", {}))
    with Store.connect(_dsn(tmp_path), read_only=True) as reader:
        together = reader.queries(*calls)
        apart = [reader.query(sql, parameters) for sql, parameters in calls]
    assert [rows.rows for rows in together] == [rows.rows for rows in apart]
    assert together[0].rows == [(3,)] and together[1].rows == [([0, 1, 2],)]
    assert str(together[2].rows[0][0]) != "0"  # the sibling that ran it was read-only
