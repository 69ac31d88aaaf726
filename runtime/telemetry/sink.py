"""Where a run's telemetry rows go, so that each store has the writers it allows.

An embedded (chDB) store admits one process per folder: the run starts one Ray actor that
holds it and every rank sends its batches there. A ClickHouse server takes many clients:
each process inserts over HTTP itself, and no actor sits in the path.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from runtime.telemetry.store import Rows, Store, StoreBusy, StoreError, describe, embedded
from runtime.telemetry.writer import Row, RowSink, StoreSink


class StoreActor:
    """The one process holding an embedded store during a run."""

    def __init__(self, dsn: str, wait_s: float = 10.0) -> None:
        # `gkr ui` and the CLI open the folder for a moment per request: wait those out.
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.store = Store.connect(dsn)
                return
            except StoreBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def ready(self) -> None:
        """Answers once the store is open (a failure to open is raised to the caller)."""

    def insert(self, table: str, rows: list[Row]) -> None:
        """Insert one batch."""
        self.store.insert(table, rows)

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Rows:
        """Run a query (the driver's end-of-run summary)."""
        return self.store.query(sql, parameters)

    def close(self) -> None:
        """Release the folder, so that the CLI and `gkr ui` can open it."""
        self.store.close()


class ActorSink:
    """A RowSink that hands batches to the run's StoreActor (waiting: back-pressure)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def insert(self, table: str, rows: list[Row]) -> None:
        """Insert through the actor; its errors come back raised."""
        ray.get(self.actor.insert.remote(table, rows))


def actor_name(run_id: str) -> str:
    """The named-actor name of a run's store holder."""
    return f"gkr-telemetry-{run_id}"


def start_store(run_id: str, dsn: str) -> Any:
    """Open the store for a run (migrating it); an actor for an embedded one, else None."""
    if not embedded(dsn):
        Store.connect(dsn).close()  # the schema, once, from the driver
        return None
    actor: Any = ray.remote(num_cpus=0)(StoreActor).options(name=actor_name(run_id)).remote(dsn)
    try:
        ray.get(actor.ready.remote())  # a busy folder fails here, before training starts
    except RayActorError as error:
        cause = getattr(error, "cause", None)  # the constructor's own error, where Ray kept it
        if isinstance(cause, StoreError):
            raise cause from error
        raise StoreError(f"telemetry store {describe(dsn)}: {error}") from error
    return actor


def stop_store(actor: Any) -> None:
    """Release the embedded store and end its actor."""
    if actor is not None:
        ray.get(actor.close.remote())
        ray.kill(actor)


def sink_for(run_id: str, dsn: str) -> RowSink:
    """The sink of one process of the run."""
    if embedded(dsn):
        return ActorSink(ray.get_actor(actor_name(run_id)))
    return StoreSink(dsn)
