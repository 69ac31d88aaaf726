"""Finding a run's bundle, listing runs, and recording what happens to a diagnosis.

A bundle is found by the run's id (or its name: the newest bundle of that name) in the local
run folders (`.gkr/runs/<name>/bundles/<run id>/`), else through the run's `CrashBundle`
event, whose message is the bundle's URI wherever it was written (gs:// included). Every step
of a diagnosis is an event of the run with source `diagnose`, so the telemetry store tells
what was proposed, approved, rejected and relaunched, and when.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.crash.files import MANIFEST, BundleError, Folder
from runtime.crash.where import BUNDLES, LOCAL_RUNS
from runtime.identity import Identity

log = logging.getLogger(__name__)
SOURCE = "diagnose"  # the `source` of a diagnosis's events
BUSY_WAIT_S = 15.0  # an embedded store held by another process for a moment (gkr ui)


@dataclass(frozen=True)
class Bundle:
    """A complete bundle: where it is and its manifest."""

    uri: str
    manifest: dict[str, Any]

    @property
    def run(self) -> str:
        return str(self.manifest["run"])

    @property
    def folder(self) -> Folder:
        return Folder(self.uri)


def open_bundle(uri: str) -> Bundle:
    """The bundle at `uri`; BundleError when it is not a complete one."""
    folder = Folder(uri)
    if not folder.exists(MANIFEST):
        raise BundleError(f"{uri}: no {MANIFEST} (not a crash bundle, or one still being "
                          "written or cut short)")
    try:
        manifest = json.loads(folder.read(MANIFEST))
    except ValueError as error:
        raise BundleError(f"{uri}/{MANIFEST}: not JSON: {error}") from None
    return Bundle(folder.uri, manifest)


def local_bundles(base: Path) -> list[Bundle]:
    """Every complete bundle under `base`/.gkr/runs, newest first."""
    found = []
    for manifest in sorted((base / LOCAL_RUNS).glob(f"*/{BUNDLES}/*/{MANIFEST}")):
        try:
            found.append(open_bundle(str(manifest.parent)))
        except BundleError as error:
            log.info("skipping %s: %s", manifest.parent, error)
    return sorted(found, key=lambda b: str(b.manifest.get("created", "")), reverse=True)


def find_bundle(run: str, base: Path, dsn: str | None = None,
                others: Sequence[Bundle] = ()) -> Bundle:
    """The bundle of run `run` (an id, or a name: its newest bundle): local first, then the
    run's CrashBundle event in the store at `dsn`."""
    local = [*others, *local_bundles(base)]
    for bundle in local:
        if bundle.run == run:
            return bundle
    named = [b for b in local if b.manifest.get("run_name") == run]
    if named:
        return named[0]
    uri = bundle_event(dsn, run) if dsn else None
    if uri:
        return open_bundle(uri)
    where = f"{base / LOCAL_RUNS}/*/{BUNDLES}" + (" or the telemetry store" if dsn else "")
    raise BundleError(f"no crash bundle of run {run!r} in {where}; `gkr runs` lists runs, "
                      "--bundle names a bundle folder (gs://...)")


def bundle_event(dsn: str, run: str) -> str | None:
    """The URI in the run's newest CrashBundle event, if any."""
    from runtime.telemetry.store import StoreError

    sql = ("SELECT argMax(message, ts) FROM events WHERE run = {run:String} "
           "AND reason = 'CrashBundle' HAVING count() > 0")
    try:
        rows = _query(dsn, sql, {"run": run})
    except StoreError as error:
        log.warning("telemetry: %s", error)
        return None
    return str(rows[0][0]) if rows else None


def list_runs(dsn: str, limit: int = 100) -> list[dict[str, Any]]:
    """The runs the store knows (runtime/crash/sql/runs.sql), newest first."""
    from runtime.crash.queries import sql

    with _store(dsn) as store:
        return store.query(sql("runs"), {"run": "", "limit": limit}).dicts()


def record(dsn: str | None, run: str, reason: str, message: str,
           severity: str = "Normal") -> str | None:
    """One event of a diagnosis; None when recorded, else why not (never raises: the
    diagnosis itself must not fail on telemetry)."""
    from runtime.telemetry.store import StoreError
    from runtime.telemetry.writer import utc_now

    if not dsn:
        return "telemetry is off for this run"
    row = {"ts": utc_now(), **Identity(run=run).row(), "source": SOURCE,
           "object_kind": "Run", "object_name": run, "reason": reason,
           "severity": severity, "message": message[:4000], "count": 1}
    try:
        with _store(dsn) as store:
            store.insert("events", [row])
    except StoreError as error:
        return str(error)
    return None


def _query(dsn: str, sql: str, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
    with _store(dsn) as store:
        return store.query(sql, parameters).rows


def _store(dsn: str) -> Any:
    """The store, waiting out another process's moment on an embedded folder. A server's
    schema is its operator's: a reader may not migrate it."""
    from runtime.telemetry.store import Store, StoreBusy, embedded

    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        try:
            return Store.connect(dsn, migrate=embedded(dsn))
        except StoreBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
