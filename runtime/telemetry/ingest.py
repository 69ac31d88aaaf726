"""Load telemetry files for offline analysis (`gkr telemetry ingest`): NCCL Inspector logs and
Flight Recorder dumps, tagged with a run, into the store.

Every file is read and checked before anything is written, so a bad file (named with its line
and field) leaves the store as it was. NCCL Inspector logs are read by the engine itself
(runtime/telemetry/inspector_load.py); Flight Recorder dumps, pickles or JSON documents of
one rank each, by Python. The parsers are imported when used: `gkr --help` imports this
module for `Kind`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import Category, RuntimeFailure
from runtime.identity import Identity

if TYPE_CHECKING:
    from runtime.telemetry.inspector_load import FileLoad
    from runtime.telemetry.store import Store


class Kind(StrEnum):
    """What the files are."""

    INSPECTOR = "inspector"  # NCCL Inspector logs, <hostname>-pid<PID>.log
    FLIGHT_RECORDER = "flight-recorder"  # Flight Recorder dumps, <prefix><rank>[.json]


class IngestError(RuntimeFailure):
    """A path to load does not exist or holds no file of the kind."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class Loaded:
    """What one file gave: rows into a table, and what was not loaded."""

    file: str
    table: str
    rows: int
    note: str = ""


@dataclass(frozen=True)
class Ingested:
    """What a load did: per file, and (Flight Recorder) torch's analysis of the dumps."""

    files: list[Loaded]
    findings: list[str] = field(default_factory=list)


def ingest(store: Store, kind: Kind, paths: Sequence[Path], identity: Identity) -> Ingested:
    """Check every file, then load them with the identity (e.g. the run) on every row."""
    files = expand(kind, paths)
    if kind is Kind.INSPECTOR:
        return _inspector(store, files, identity)
    return _flight_recorder(store, files, identity)


def expand(kind: Kind, paths: Sequence[Path]) -> list[Path]:
    """The files named, a folder standing for its files of the kind (`*.log`; dumps)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.is_file() and _of_kind(kind, p))
            if not inside:
                raise IngestError(f"{path}: no {kind} files in this folder")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise IngestError(f"{path}: no such file or folder")
    return found


def _of_kind(kind: Kind, path: Path) -> bool:
    from runtime.telemetry.flight_recorder import dump_name

    return path.suffix == ".log" if kind is Kind.INSPECTOR else dump_name(path.name)


def _inspector(store: Store, files: list[Path], identity: Identity) -> Ingested:
    from runtime.telemetry import inspector, inspector_load

    logs = inspector_load.load(store, files, identity)
    return Ingested([Loaded(str(log.path), inspector.TABLE, log.rows, _notes(log))
                     for log in logs])


def _notes(log: FileLoad) -> str:
    notes = []
    if log.stats:
        notes.append(f"{log.stats} dump_stats records")
    if log.dropped:
        notes.append(f"the plugin dropped {log.dropped} records (ring full)")
    if log.truncated:
        notes.append("last line incomplete, skipped")
    return "; ".join(notes)


def _flight_recorder(store: Store, files: list[Path], identity: Identity) -> Ingested:
    from runtime.telemetry import flight_recorder

    dumps = flight_recorder.one_per_rank([flight_recorder.read_dump(p) for p in files])
    tagged = {d.source: [{**identity.row(), **row} for row in flight_recorder.rows(d)]
              for d in dumps}
    loaded = []
    for dump in dumps:
        store.insert(flight_recorder.TABLE, tagged[dump.source])
        loaded.append(Loaded(dump.source, flight_recorder.TABLE, len(tagged[dump.source]),
                             f"rank {dump.rank}"))
    try:
        findings = flight_recorder.analyze(dumps)
    except flight_recorder.FlightRecorderError as error:  # loaded all the same
        findings = [f"analysis failed: {error}"]
    return Ingested(loaded, findings)
