"""NCCL Inspector logs into the store, parsed once, by the engine (issue 27): the load of
`gkr telemetry ingest inspector`.

ClickHouse's JSONEachRow reader reads the files into a temporary staging table, typed by the
record's structure (the `nccl_records` table of schema/0009_nccl_records.sql) with every
field Nullable, so that a missing one shows, and every integer an Int128, so that one outside
its column shows; each row keeps its file and row number. chDB's `file()` reads an embedded
store's files where they lie, in one query; a server is sent each file's bytes. Then, in the
engine, over the staged rows:

1. one pass: per file, its records, its dump_stats records and the drops they report, and
   its first row that fails a check of `inspector.parse_line` (runtime/telemetry/inspector.py:
   each field present, in its column's range (runtime/telemetry/columns.py), the format
   version, UTF-8 strings, a coll_perf, p2p_perf or dump_stats object). parse_line itself
   then checks that row's line, for a message naming the file, line and field, and nothing
   is written;
2. one INSERT of the records, in the types `nccl_records` takes, whose view writes
   `collectives`: every file's rows or, as a bad line stops the load before, none.

A file the reader refuses (not JSON, a field of the wrong JSON type, nesting deeper than the
Python check allows) stops the load too, named by the Python check of that file. A last line
without its newline is the plugin writing or killed mid-line: left out and reported, as the
Python check does (the engine reads a copy without it).

Where the engine is more lenient than parse_line (tests/telemetry/test_inspector_load.py): a
number written as a string ("7") is read as the number, and an integer of more than 38 digits
wraps in the reader (refused only if it wraps out of its column's range).
"""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.identity import Identity
from runtime.telemetry import columns, inspector
from runtime.telemetry.inspector import InspectorError
from runtime.telemetry.store import QueryError, Store, embedded

TABLE = "nccl_records"  # schema/0009_nccl_records.sql
SECTIONS = ("header", "metadata", "coll_perf", "p2p_perf")  # its Tuple columns
PERFS = {"coll_perf": "coll", "p2p_perf": "p2p"}  # section -> field prefix
# dump_stats (format v4.2): no row; its drop counts are reported.
STATS_FIELDS = ("coll_records", "coll_dropped_since_last_dump", "p2p_records",
                "p2p_dropped_since_last_dump")
# The reader as strict as parse_line where ClickHouse can be: a number, boolean, object or
# array is not a string, a boolean is not a number; keys the structure does not name (verbose
# traces, newer fields) are skipped; an absent field is NULL. The reader counts levels from
# the record's own object and refuses one past max_depth + 1, so MAX_DEPTH - 2 refuses what
# parse_line refuses (tests/telemetry/test_inspector_load.py pins the boundary).
READ_SETTINGS = {
    "input_format_json_read_numbers_as_strings": 0,
    "input_format_json_read_bools_as_numbers": 0,
    "input_format_json_read_bools_as_strings": 0,
    "input_format_json_read_objects_as_strings": 0,
    "input_format_json_read_arrays_as_strings": 0,
    "input_format_skip_unknown_fields": 1,
    "input_format_json_ignore_unknown_keys_in_named_tuple": 1,
    "input_format_json_defaults_for_missing_elements_in_named_tuple": 1,
    "input_format_json_max_depth": inspector.MAX_DEPTH - 2,
}
_GLOB = re.compile(r"[*?{}\[\]]")  # file() reads these as a glob
_ENGINE_FILE = re.compile(r"\(in file/uri (.+?)\)")
_ENGINE_ROW = re.compile(r"\(at row (\d+)\)")


@dataclass(frozen=True)
class FileLoad:
    """What one file gave: its records (rows), dump_stats records, reported drops, and
    whether its last line was cut off (and left out)."""

    path: Path
    rows: int
    stats: int = 0
    dropped: int = 0
    truncated: bool = False


def load(store: Store, paths: Sequence[Path], identity: Identity | None = None
         ) -> list[FileLoad]:
    """Check and load the files, all or none; each record gets the identity's non-empty keys
    (the command line's `--run`), never its own."""
    with _staging(store) as staging, tempfile.TemporaryDirectory(prefix="gkr-ingest-") as tmp:
        files = [_Staged(path, index, Path(tmp)) for index, path in enumerate(paths)]
        _stage(store, staging, Path(tmp), [f for f in files if f.readable])
        counts = _survey(store, staging, files)
        store.command(_insert_sql(staging), _identity_parameters(identity or Identity()))
    return [FileLoad(f.path, *counts.get(f.index, (0, 0, 0)), truncated=f.truncated)
            for f in files]


class _Staged:
    """One file on its way in, as the engine reads it: `<index>.log` in the load's folder, a
    link to the file or, where its last line is cut off, a copy without that line (nothing,
    when no line is whole). The index names the file in the staged rows."""

    def __init__(self, path: Path, index: int, folder: Path) -> None:
        self.path, self.index = path, index
        self.source = folder / f"{index}.log"
        end = _complete_end(path)
        self.truncated = end is not None
        self.readable = end != 0
        if end is None:
            self.source.symlink_to(path.absolute())
        elif end:
            self.source.write_bytes(path.read_bytes()[:end])


def _complete_end(path: Path) -> int | None:
    """None when the file ends in a newline (or is empty), else where its last whole line
    ends: 0 if it has none."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            if size == 0:
                return None
            file.seek(size - 1)
            if file.read(1) == b"\n":
                return None
            file.seek(0)
            return file.read().rfind(b"\n") + 1
    except OSError as error:
        raise InspectorError(f"{path}: cannot read: {error.strerror or error}") from error


# --- the staging table ----------------------------------------------------------------------

def record_sections() -> dict[str, dict[str, str]]:
    """The record's sections and their fields' types, as `nccl_records` stores them."""
    table = columns.schema_columns()[TABLE]
    return {name: columns.tuple_elements(table[name]) for name in SECTIONS}


def read_structure() -> str:
    """The record as the reader reads it: each field Nullable, integers Int128."""
    sections = {name: {field: _wide(kind) for field, kind in fields.items()}
                for name, fields in record_sections().items()}
    sections["dump_stats"] = dict.fromkeys(STATS_FIELDS, "Nullable(Int128)")
    return ", ".join(f"{name} Tuple({', '.join(f'{f} {k}' for f, k in fields.items())})"
                     for name, fields in sections.items())


def _wide(kind: str) -> str:
    inner = columns.unwrap(kind)
    return "Nullable(Int128)" if re.fullmatch(r"U?Int\d+", inner) else f"Nullable({inner})"


@contextmanager
def _staging(store: Store) -> Iterator[str]:
    """A temporary table of the session: dropped afterwards, gone with the session if the
    process dies; nothing of it reaches the store's tables before the last step."""
    name = f"nccl_ingest_{uuid.uuid4().hex}"
    store.command(f"CREATE TEMPORARY TABLE {name} ({read_structure()}, file UInt32, "
                  "row UInt64) ENGINE = Memory")
    try:
        yield name
    finally:
        store.command(f"DROP TEMPORARY TABLE IF EXISTS {name}")


def _kinded(staging: str) -> str:
    """The staged rows with what each record is (`record_kind`, is_coll_perf, is_p2p_perf)."""
    return (f"(SELECT *, record_kind = 'coll_perf' AS is_coll_perf, record_kind = 'p2p_perf' "
            f"AS is_p2p_perf FROM (SELECT *, {_kind_sql()} AS record_kind FROM {staging}))")


def _stage(store: Store, staging: str, folder: Path, files: Sequence[_Staged]) -> None:
    """The files' rows into the staging table; a file the reader refuses is named by the
    Python check."""
    if not files:
        return
    if not embedded(store.dsn):
        _stage_by_body(store, staging, files)
        return
    try:
        _stage_in_place(store, staging, folder)
    except QueryError as error:
        raise _refused(files, str(error)) from error


def _stage_in_place(store: Store, staging: str, folder: Path) -> None:
    """chDB reads the files itself, the whole folder in one query (a query per file, as a
    64-file UNION ALL, costs half as much again: benchmarks/telemetry.py's load)."""
    if _GLOB.search(str(folder)):
        raise InspectorError(f"{folder}: the temporary folder's path holds a glob character "
                             "(TMPDIR); use another")
    store.command(
        f"INSERT INTO {staging} SELECT *, toUInt32(splitByChar('.', _file)[1]), _row_number "
        f"FROM file({_literal(str(folder / '*.log'))}, 'JSONEachRow', "
        f"{_literal(read_structure())})", settings=READ_SETTINGS)


def _stage_by_body(store: Store, staging: str, files: Sequence[_Staged]) -> None:
    """A server cannot read the client's files: each is sent as the body of an insert into
    a second temporary table, then moved with its index and row numbers (read in order, in
    one stream)."""
    arrivals = f"{staging}_arrivals"
    store.command(f"CREATE TEMPORARY TABLE {arrivals} ({read_structure()}) ENGINE = Memory")
    try:
        for staged in files:
            try:
                store.insert_raw(arrivals, "JSONEachRow", staged.source.read_bytes(),
                                 settings=READ_SETTINGS)
            except QueryError as error:
                raise _refused([staged], str(error)) from error
            store.command(f"INSERT INTO {staging} SELECT *, {staged.index}, "
                          f"rowNumberInAllBlocks() FROM {arrivals}", settings={"max_threads": 1})
            store.command(f"TRUNCATE TABLE {arrivals}")
    finally:
        store.command(f"DROP TEMPORARY TABLE IF EXISTS {arrivals}")


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# --- the checks -----------------------------------------------------------------------------

def _present(section: str, fields: Sequence[str]) -> str:
    return "(" + " OR ".join(f"{section}.{field} IS NOT NULL" for field in fields) + ")"


def _kind_sql() -> str:
    """Which object makes the record what it is, in parse_line's order."""
    perfs = record_sections()
    return (f"multiIf({_present('dump_stats', STATS_FIELDS)}, 'dump_stats', "
            f"{_present('coll_perf', list(perfs['coll_perf']))}, 'coll_perf', "
            f"{_present('p2p_perf', list(perfs['p2p_perf']))}, 'p2p_perf', '')")


def _problems() -> list[tuple[str, str]]:
    """(condition, what is wrong) for every check of parse_line the engine makes, in its
    order, over rows read; `record_kind` is _kind_sql's."""
    sections = record_sections()
    found = []
    for section in ("header", "metadata"):
        found += _field_problems(section, sections[section], "")
    version = "metadata.inspector_output_format_version"
    found.append((f"NOT startsWith({version}, {_literal(inspector.FORMAT_MAJOR)})",
                   f"{version} is not supported"))
    found.append(("record_kind = ''", "no coll_perf, p2p_perf or dump_stats object"))
    for section in PERFS:
        found += _field_problems(section, sections[section], f"is_{section} AND ")
    return found


def _field_problems(section: str, fields: Mapping[str, str], when: str
                    ) -> list[tuple[str, str]]:
    """A required field missing, an integer outside its column, a string not UTF-8; `when`
    (a condition and AND, or nothing) says whether the section is checked. A NULL passes
    the other checks (NULL, not true): its own check names it."""
    found = []
    for field, kind in fields.items():
        value = f"{section}.{field}"
        if not kind.startswith("Nullable"):
            found.append((f"{when}{value} IS NULL", f"{value}: missing"))
        if columns.unwrap(kind) == "String":
            found.append((f"{when}NOT isValidUTF8({value})", f"{value}: not UTF-8"))
        column = _column_of(section, field)
        bounds = columns.bounds(inspector.TABLE, column) if column else None
        if bounds is not None:
            low, high = columns.micros(bounds).low, columns.micros(bounds).high
            found.append((f"{when}NOT ({value} BETWEEN {low} AND {high})",
                          f"{value}: outside {inspector.TABLE}.{column}"))
    return found


def _column_of(section: str, field: str) -> str | None:
    """The `collectives` column a record field is stored in, where it has a range."""
    if section in PERFS:
        return inspector.PERF_COLUMNS.get(field.removeprefix(PERFS[section] + "_"))
    return {"header": inspector.HEADER_COLUMNS,
            "metadata": inspector.METADATA_COLUMNS}[section].get(field)


def _survey(store: Store, staging: str, files: Sequence[_Staged]
            ) -> dict[int, tuple[int, int, int]]:
    """Per file index: its records, dump_stats records and the drops they report; stops at
    the first bad row, named by the Python check of its line. The reason is worked out for
    bad rows only (`if` evaluates a branch only where it is taken)."""
    problems = _problems()
    bad = " OR ".join(f"({condition})" for condition, _ in problems)
    reason = "multiIf(" + ", ".join(f"{c}, {_literal(m)}" for c, m in problems) + ", '')"
    dropped = " + ".join(f"ifNull(dump_stats.{f}, 0)" for f in STATS_FIELDS if "dropped" in f)
    stats = "record_kind = 'dump_stats'"
    rows = store.query(
        f"SELECT file, countIf(NOT {stats}), countIf({stats}), toUInt64(sumIf({dropped}, "
        f"{stats})), minIf(row, bad), argMinIf(if(bad, {reason}, ''), row, bad) FROM "
        f"(SELECT *, {bad} AS bad FROM {_kinded(staging)}) GROUP BY file ORDER BY file").rows
    for file, _, _, _, row, why in rows:
        if why:
            raise _explained(files[file].path, int(row), str(why))
    return {int(file): (int(records), int(stats), int(lost))
            for file, records, stats, lost, _, _ in rows}


def _explained(path: Path, row: int, why: str) -> InspectorError:
    """parse_line's error for the `row`th record line of the file (it makes every check the
    engine makes); the engine's reason where parse_line takes the line."""
    number, raw = _record_line(path, row)
    inspector.parse_line(raw, f"{path}:{number}")
    return InspectorError(f"{path}:{number}: {why}")


def _record_line(path: Path, row: int) -> tuple[int, bytes]:
    """The line number and bytes of the file's `row`th (from 0) non-blank line: the engine's
    row, which skips blank lines."""
    seen = -1
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if raw.strip():
            seen += 1
            if seen == row:
                return number, raw
    raise InspectorError(f"{path}: the engine named row {row + 1}, which the file lacks")


def _refused(files: Sequence[_Staged], message: str) -> InspectorError:
    """The reader refused a file: the Python check of that file names the line; else the
    engine's words, with its row as a line."""
    named = _ENGINE_FILE.search(message)
    by_source = {str(f.source): f for f in files}
    suspects = [by_source[named.group(1)]] if named and named.group(1) in by_source else files
    for staged in suspects:
        inspector.read_log(staged.path)  # raises on the line it cannot take
    row = _ENGINE_ROW.search(message)
    if len(suspects) == 1 and row:
        number, _ = _record_line(suspects[0].path, int(row.group(1)) - 1)
        return InspectorError(f"{suspects[0].path}:{number}: the engine cannot read it: "
                              f"{message}")
    return InspectorError(f"the engine cannot read {', '.join(str(f.path) for f in suspects)}"
                          f": {message}")


# --- the insert -----------------------------------------------------------------------------

def _insert_sql(staging: str) -> str:
    """The staged records (not dump_stats) as `nccl_records` rows, identity from the
    parameters."""
    sections = record_sections()
    values = [_section_sql(name, sections[name]) for name in SECTIONS]
    identity = [key for key in inspector.IDENTITY_KEYS if key != "pod"]
    values += [f"{{{key}:String}}" for key in identity]
    return (f"INSERT INTO {TABLE} ({', '.join([*SECTIONS, *identity, 'pod'])}) SELECT "
            f"{', '.join(values)}, nullIf({{pod:String}}, '') FROM {_kinded(staging)} "
            "WHERE is_coll_perf OR is_p2p_perf")


def _section_sql(section: str, fields: Mapping[str, str]) -> str:
    """One section as `nccl_records` types it. The checks leave no required field of a
    record's header, metadata and own perf object NULL; the other perf object is all NULL
    (its fields the types' defaults), and a p2p_perf beside a coll_perf is emptied, as
    parse_line reads only the first."""
    kind = f"Tuple({', '.join(f'{f} {k}' for f, k in fields.items())})"
    if section not in PERFS:
        return f"CAST({section}, {_literal(kind)})"
    elements = [f"ifNull({section}.{field}, {_default(field_kind)})"
                for field, field_kind in fields.items()]
    if section == "p2p_perf":
        elements[0] = f"if(is_coll_perf, '', {elements[0]})"
    return f"CAST(tuple({', '.join(elements)}), {_literal(kind)})"


def _default(kind: str) -> str:
    return "''" if kind == "String" else "0"


def _identity_parameters(identity: Identity) -> dict[str, Any]:
    keys = inspector.identity_keys(identity)
    return {key: str(keys.get(key, "")) for key in inspector.IDENTITY_KEYS}
