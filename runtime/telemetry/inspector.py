"""NCCL Inspector logs (`<dir>/<hostname>-pid<PID>.log`): what a line may be, checked in Python.

The NCCL profiler plugin writes one JSON object per line (reference/telemetry.md §1; NVIDIA/nccl
`plugins/profiler/inspector/inspector_json.cc`, format v4.x). The store loads them through
`nccl_records`, whose view writes `collectives` rows (`source = 'nccl_inspector'`;
schema/0009_nccl_records.sql): Fluent Bit posts the nodes' lines there, and `gkr telemetry
ingest` has the engine read the files (runtime/telemetry/inspector_load.py), so a file loaded
here and a line posted from a node give the same row. The checks below are the reference of
the engine's: it makes them as it loads, and `parse_line` names the file, line and field of a
line the engine refused, as `file:line: field: problem`, before anything is written.

What a line may be:
* a `coll_perf` or `p2p_perf` record: one row each;
* a `dump_stats` record (newer plugins write one per communicator and dump, before its
  records): no row, but its `*_dropped_since_last_dump` counts are summed and reported, since
  they say the plugin's ring overflowed and records are missing;
* an unterminated last line: the plugin was writing, or was killed mid-line. It is skipped and
  reported; any other malformed line is an error, since the plugin writes whole lines only.

A number the view would store as something else (a rank beyond Int32, a negative size, a time
beyond what the tables' TTL can hold) is an error naming its field and the column's range
(runtime/telemetry/columns.py, from the schema's DDL), as is nesting deeper than a record's.
A record's own identity keys (`cluster`, `job`, …) are dropped: the identity given with the
load (the command line's `--run`) is the one the rows get.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runtime.errors import Category, RuntimeFailure
from runtime.identity import Identity
from runtime.telemetry import columns

if TYPE_CHECKING:
    from runtime.telemetry.writer import TelemetryWriter

FORMAT_MAJOR = "v4."  # inspector_output_format_version: "v4.0" in v2.28-v2.30, "v4.2" after
RAW_TABLE = "nccl_raw"  # schema/0002: records as strings, extracted by its view
PROCESSES_TABLE = "rank_processes"  # schema/0006_global_ranks.sql
# The view reads these top-level keys (schema/0002_nccl_raw.sql); the rest of the identity is
# fixed there (an inspector rank is a communicator rank, not a training rank).
IDENTITY_KEYS = ("cluster", "namespace", "team", "job", "kind", "run", "pod", "node")
# json.cc writes doubles with "%lf" and NaN as "nan"; an infinite bandwidth (a zero-µs op)
# comes out as a bare `inf`, which is not JSON: quoted, the view reads it as NULL like "nan".
_BARE_INF = re.compile(rb'(?<=:)(-?inf)(?=[,}])')
# A record is three levels deep (inspector_json.cc); ClickHouse's JSON functions stop at their
# own depth limit, which would fail an insert half-way through a load.
MAX_DEPTH = 16
TABLE = "collectives"  # where the view writes (schema/0002, 0005)
# Record fields and the `collectives` column the view stores each in.
HEADER_COLUMNS = {"rank": "rank", "n_ranks": "n_ranks", "nnodes": "nnodes"}
METADATA_COLUMNS = {"dump_timestamp_us": "ts", "pid": "pid"}
PERF_COLUMNS = {"sn": "coll_sn", "msg_size_bytes": "msg_size_bytes"}


class InspectorError(RuntimeFailure):
    """An NCCL Inspector log is not what the plugin writes; names the file, line and field."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class InspectorLog:
    """One checked log file: its records as NDJSON lines, and what was not a record."""

    path: Path
    lines: list[bytes]  # the coll_perf/p2p_perf records, one compact JSON object each
    stats: int = 0  # dump_stats records (no row)
    dropped: int = 0  # records the plugin reported lost to a full ring
    truncated: bool = False  # the last line was cut off and skipped


def read_log(path: Path, identity: Identity | None = None) -> InspectorLog:
    """Check every line of a log; each record gets the identity's non-empty keys added."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InspectorError(f"{path}: cannot read: {error.strerror or error}") from error
    extra = identity_keys(identity or Identity())
    raw_lines = data.split(b"\n")
    last = raw_lines.pop()  # b"" when the file ends with a newline, as every whole line does
    lines, stats, dropped = [], 0, 0
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        record = parse_line(raw, f"{path}:{number}")
        if "dump_stats" in record:
            stats += 1
            dropped += _dropped(record["dump_stats"], f"{path}:{number}")
            continue
        own = {key: value for key, value in record.items() if key not in IDENTITY_KEYS}
        lines.append(json.dumps({**own, **extra}, separators=(",", ":")).encode())
    return InspectorLog(path, lines, stats, dropped, truncated=bool(last.strip()))


def identity_keys(identity: Identity) -> dict[str, object]:
    """The identity keys a record carries to the view; empty ones are left out, so that the
    view falls back to the record's own `hostname` for the pod."""
    row = identity.row()
    return {key: row[key] for key in IDENTITY_KEYS if row[key]}


def parse_line(raw: bytes, where: str) -> dict[str, Any]:
    """One line as the plugin writes it, checked; `where` is `file:line` for messages."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InspectorError(f"{where}: not UTF-8 text (byte {error.start}); an NCCL "
                             "Inspector log is JSON lines") from error
    record = _json(text, where)
    if not isinstance(record, dict):
        raise InspectorError(f"{where}: expected a JSON object, got {type(record).__name__}")
    _check_depth(record, where)
    _check_header(record, where)
    if "dump_stats" in record:
        return record
    for section, prefix in (("coll_perf", "coll"), ("p2p_perf", "p2p")):
        if section in record:
            _check_perf(_section(record, section, where), prefix, f"{where}: {section}")
            return record
    raise InspectorError(f"{where}: no coll_perf, p2p_perf or dump_stats object: not an "
                         "NCCL Inspector record")


def announce_process(writer: TelemetryWriter) -> None:
    """Say which process this training rank is: the host name and pid its NCCL Inspector
    records carry (gethostname() and getpid(), NVIDIA/nccl inspector.cc), under the writer's
    identity, whose rank is global. A record's rank is the rank within its communicator; the
    straggler analysis finds the global rank through this row (schema/0006_global_ranks.sql)."""
    writer.write(PROCESSES_TABLE, {"hostname": socket.gethostname(), "pid": os.getpid()})


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text, parse_constant=_not_json)
    except RecursionError as error:  # the decoder recurses per level
        raise InspectorError(f"{where}: nested deeper than {MAX_DEPTH} levels: not an NCCL "
                             "Inspector record") from error
    except json.JSONDecodeError as error:
        fixed = _BARE_INF.sub(rb'"\1"', text.encode()).decode()
        if fixed != text:
            return _json(fixed, where)
        raise InspectorError(f"{where}: not JSON: {error.msg} at column {error.colno}") \
            from error


def _check_depth(record: Mapping[str, Any], where: str) -> None:
    """No deeper than MAX_DEPTH (a walk without recursion: the record may be deep)."""
    level: list[Any] = [record]
    for depth in range(1, MAX_DEPTH + 1):
        level = [child for value in level for child in (
            value.values() if isinstance(value, dict) else value)
            if isinstance(child, dict | list)]
        if not level:
            return
        if depth == MAX_DEPTH:
            raise InspectorError(f"{where}: nested deeper than {MAX_DEPTH} levels: not an "
                                 "NCCL Inspector record")


def _in_range(section: Mapping[str, Any], fields: Mapping[str, str], where: str) -> None:
    """Each field within its column's range (the view would wrap or zero it)."""
    for name, column in fields.items():
        found = columns.bounds(TABLE, column)
        if found is None:
            continue
        found = columns.micros(found)
        if not found.holds(section[name]):
            kind = columns.unwrap(columns.schema_columns()[TABLE][column])
            unit = " µs since the epoch" if column == "ts" else ""
            raise InspectorError(f"{where}.{name}: {section[name]} is outside {TABLE}.{column} "
                                 f"({kind}: {found.low} to {found.high}{unit})")


def _not_json(token: str) -> Any:
    """Python reads NaN and Infinity, which JSON (and ClickHouse) do not."""
    raise json.JSONDecodeError(f"{token} is not JSON", token, 0)


def _check_header(record: Mapping[str, Any], where: str) -> None:
    header = _section(record, "header", where)
    meta = _section(record, "metadata", where)
    version = meta.get("inspector_output_format_version")
    if not (isinstance(version, str) and version.startswith(FORMAT_MAJOR)):
        raise InspectorError(f"{where}: metadata.inspector_output_format_version: {version!r} "
                             f"is not supported ({FORMAT_MAJOR}x is)")
    _fields(header, {"id": str, "rank": int, "n_ranks": int, "nnodes": int},
            f"{where}: header")
    _fields(meta, {"dump_timestamp_us": int, "hostname": str, "pid": int}, f"{where}: metadata")
    _in_range(header, HEADER_COLUMNS, f"{where}: header")
    _in_range(meta, METADATA_COLUMNS, f"{where}: metadata")


def _check_perf(perf: Mapping[str, Any], p: str, where: str) -> None:
    _fields(perf, {p: str, f"{p}_sn": int, f"{p}_msg_size_bytes": int,
                   f"{p}_timing_source": str}, where)
    _in_range(perf, {f"{p}_{name}": column for name, column in PERF_COLUMNS.items()}, where)
    for name in (f"{p}_exec_time_us", f"{p}_algobw_gbs", f"{p}_busbw_gbs"):
        value = perf.get(name)
        if not _number(value) and value not in ("nan", "inf", "-inf"):
            raise InspectorError(f"{where}.{name}: expected a number or \"nan\", got {value!r}")


def _section(record: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = record.get(name)
    if not isinstance(value, dict):
        shown = "missing" if name not in record else f"got {value!r}"
        raise InspectorError(f"{where}: {name}: expected an object, {shown}")
    return value


def _fields(section: Mapping[str, Any], types: Mapping[str, type], where: str) -> None:
    for name, kind in types.items():
        value = section.get(name)
        wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if wrong:
            expected = "an integer" if kind is int else "a string"
            shown = "missing" if name not in section else f"got {value!r}"
            raise InspectorError(f"{where}.{name}: expected {expected}, {shown}")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _dropped(stats: object, where: str) -> int:
    if not isinstance(stats, dict):
        raise InspectorError(f"{where}: dump_stats: expected an object, got {stats!r}")
    counts = [stats.get(f"{p}_dropped_since_last_dump", 0) for p in ("coll", "p2p")]
    return sum(count for count in counts if isinstance(count, int))
