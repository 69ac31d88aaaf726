"""Rows off the training thread: a bounded queue drained in batches by a background thread.

`write` never blocks: when the queue is full the row is dropped and counted, and the count is
logged and written as an event when the writer closes (and readable at any time), so a slow
store costs telemetry, never a training step. Values may be 0-d tensors: the background
thread turns them into floats, so a step does not wait for its loss to reach the host.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from runtime.identity import Identity
from runtime.telemetry.store import Store, embedded

log = logging.getLogger(__name__)
Row = dict[str, Any]


class RowSink(Protocol):
    """Where batches go: the store itself, or the one process that holds it."""

    def insert(self, table: str, rows: list[Row]) -> None:
        """Insert the rows into `table` (raising on failure)."""


class StoreSink:
    """A RowSink that inserts from this process. A server store keeps one connection, opened
    on the first batch (on the writer's thread) and again after a failure, so a writer starts,
    and goes on, while the store is down. An embedded store is opened for each batch only:
    holding its folder would lock out runs and `gkr ui`."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.store: Store | None = None

    def insert(self, table: str, rows: list[Row]) -> None:
        """Insert one batch."""
        if embedded(self.dsn):
            with Store.connect(self.dsn) as store:
                store.insert(table, rows)
            return
        if self.store is None:
            self.store = Store.connect(self.dsn)
        try:
            self.store.insert(table, rows)
        except Exception:
            self.store.close()
            self.store = None
            raise


def utc_now() -> datetime:
    """The row timestamp: timezone-aware UTC (the tables' DateTime64(6, 'UTC'))."""
    return datetime.now(UTC)


class TelemetryWriter:
    """Batches rows of one process, stamped with its identity and the time of the call."""

    def __init__(self, sink: RowSink, identity: Identity, capacity: int = 50_000,
                 batch_rows: int = 5_000, interval_s: float = 1.0) -> None:
        self.sink, self.identity = sink, identity.row()
        self.batch_rows, self.interval_s = batch_rows, interval_s
        self.queue: queue.Queue[tuple[str, Row] | None] = queue.Queue(maxsize=capacity)
        self.dropped = 0  # rows refused because the queue was full, or lost by a failed insert
        self.written = 0
        self._thread = threading.Thread(target=self._drain, name="gkr-telemetry", daemon=True)
        self._thread.start()

    def write(self, table: str, values: Mapping[str, Any]) -> None:
        """Queue one row of `table`; drop and count it when the queue is full."""
        row = {"ts": utc_now(), **self.identity, **values}
        try:
            self.queue.put_nowait((table, row))
        except queue.Full:
            self.dropped += 1

    def close(self, timeout_s: float = 30.0) -> None:
        """Write what is queued, stop the thread, and say how many rows were dropped."""
        self.queue.put(None)  # blocks only while the thread drains a full queue
        self._thread.join(timeout_s)
        if self.dropped:
            log.warning("telemetry: %d rows dropped (queue full or store failing), %d written",
                        self.dropped, self.written)
            self._insert({"events": [self._drop_event()]})

    def _drain(self) -> None:
        stop = False
        while not stop:
            batch, stop = self._collect()
            if batch:
                self._insert(batch)

    def _collect(self) -> tuple[dict[str, list[Row]], bool]:
        """Rows until the batch is full, the interval has passed, or close was asked."""
        batch: dict[str, list[Row]] = defaultdict(list)
        count, deadline = 0, time.monotonic() + self.interval_s
        while count < self.batch_rows:
            try:
                item = self.queue.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return batch, False
            if item is None:
                return batch, True
            table, row = item
            batch[table].append({key: _plain(value) for key, value in row.items()})
            count += 1
        return batch, False

    def _insert(self, batch: Mapping[str, list[Row]]) -> None:
        for table, rows in batch.items():
            try:
                self.sink.insert(table, rows)
                self.written += len(rows)
            except Exception as error:  # telemetry must never take the run down
                self.dropped += len(rows)
                log.warning("telemetry: %d rows of %s lost: %s", len(rows), table, error)

    def _drop_event(self) -> Row:
        return {"ts": utc_now(), **self.identity, "source": "telemetry",
                "object_kind": "Writer", "object_name": "", "reason": "RowsDropped",
                "severity": "Warning", "count": self.dropped,
                "message": f"{self.dropped} telemetry rows dropped; {self.written} written"}


def _plain(value: Any) -> Any:
    """A 0-d tensor (a loss) as a float; anything else as it is."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "ndim", None) == 0 else value
