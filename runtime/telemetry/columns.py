"""The tables' column types, read from the schema files (the one place they are written), and
the values each type can hold, so that a loader refuses a value the store would keep as
something else: ClickHouse wraps or zeroes an integer outside its type (rank 2**70 -> 0, a
negative size in a UInt64 -> 0) and a time outside DateTime's range wraps in the tables' TTL
(`toDateTime(ts)`), which then drops the row at once.

tests/telemetry/test_columns.py checks this parse against the engine's own `system.columns`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache

_TABLE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+)\s*\((.*?)^\)(.*?);", re.M | re.S)
_COLUMN = re.compile(r"^\s+(\w+)\s+(.+?),?\s*(?:--.*)?$")  # a trailing comment aside
_ALTER = re.compile(r"^ALTER TABLE (\w+)\s+(ADD COLUMN .*?);", re.M | re.S)
_ADDED = re.compile(r"ADD COLUMN IF NOT EXISTS (\w+)\s+(.+?)\s*(?:,\s*$|$)", re.M)
_INTEGER = re.compile(r"^(U?)Int(8|16|32|64|128|256)$")
_WRAPPERS = re.compile(r"^(?:Nullable|LowCardinality|SimpleAggregateFunction\(\w+,)\s*\(?(.*)\)$")
_TTL_TIME = re.compile(r"\bTTL\s+toDateTime\((\w+)\)")
# ClickHouse's documented ranges (docs: data-types/datetime, datetime64): DateTime is seconds
# in a UInt32; DateTime64 spans 1900-01-01 to 2299-12-31.
DATETIME_RANGE = (datetime(1970, 1, 1, tzinfo=UTC), datetime(2106, 2, 7, 6, 28, 15, tzinfo=UTC))
DATETIME64_RANGE = (datetime(1900, 1, 1, tzinfo=UTC),
                    datetime(2299, 12, 31, 23, 59, 59, 999999, tzinfo=UTC))


@dataclass(frozen=True)
class Bounds:
    """The values a column holds: integers or aware datetimes, low and high included."""

    low: int | datetime
    high: int | datetime

    def holds(self, value: object) -> bool:
        if isinstance(self.low, int):
            return isinstance(value, int) and self.low <= value <= int(self.high)  # type: ignore[arg-type]
        return isinstance(value, datetime) and self.low <= value <= self.high  # type: ignore[operator]

    def __str__(self) -> str:
        if isinstance(self.low, datetime) and isinstance(self.high, datetime):
            return f"{self.low.isoformat()} to {self.high.isoformat()}"
        return f"{self.low} to {self.high}"


@cache
def schema_columns() -> dict[str, dict[str, str]]:
    """Every table the schema files create: its columns and their types, as written."""
    from runtime.telemetry.store import migrations  # the store imports nothing from here

    found: dict[str, dict[str, str]] = {}
    for _, _, sql in migrations():
        text = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
        for table, body, _ in _TABLE.findall(text):
            found[table] = {m.group(1): m.group(2) for m in map(_COLUMN.match, _lines(body))
                            if m}
        for table, body in _ALTER.findall(text):  # columns added by a later migration
            found[table] |= dict(_ADDED.findall(body))
    return found


def _lines(body: str) -> list[str]:
    """A table's column lines, a type written over several lines (a Tuple's) joined into one."""
    joined: list[str] = []
    for line in body.splitlines():
        if joined and joined[-1].count("(") > joined[-1].count(")"):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


@cache
def _ttl_times() -> dict[str, str]:
    """The column each table's TTL turns into a DateTime."""
    from runtime.telemetry.store import migrations

    found = {}
    for _, _, sql in migrations():
        for table, _, tail in _TABLE.findall(sql):
            ttl = _TTL_TIME.search(tail)
            if ttl:
                found[table] = ttl.group(1)
    return found


def bounds(table: str, column: str) -> Bounds | None:
    """What `table.column` holds; None for types without a range here (strings, floats)."""
    kind = unwrap(schema_columns()[table][column])
    integer = _INTEGER.match(kind)
    if integer:
        bits = int(integer.group(2))
        if integer.group(1):
            return Bounds(0, 2**bits - 1)
        return Bounds(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if kind.startswith("DateTime"):
        low, high = DATETIME64_RANGE if kind.startswith("DateTime64") else DATETIME_RANGE
        if _ttl_times().get(table) == column:  # the TTL's toDateTime must not wrap
            low, high = max(low, DATETIME_RANGE[0]), min(high, DATETIME_RANGE[1])
        return Bounds(low, high)
    return None


def micros(found: Bounds) -> Bounds:
    """Time bounds as microseconds since the epoch (a record's `dump_timestamp_us`)."""
    if isinstance(found.low, int):
        return found
    return Bounds(_micros(found.low), _micros(found.high))  # type: ignore[arg-type]


def _micros(moment: datetime) -> int:
    return (moment - DATETIME_RANGE[0]) // timedelta(microseconds=1)


def unwrap(kind: str) -> str:
    """The stored type inside Nullable(…), LowCardinality(…), SimpleAggregateFunction(f, …)."""
    while True:
        inner = _WRAPPERS.match(kind)
        if not inner:
            return kind.strip()
        kind = inner.group(1).strip()


def tuple_elements(kind: str) -> dict[str, str]:
    """A named Tuple type's elements and their types: `Tuple(a String, b Nullable(Int64))`
    -> {"a": "String", "b": "Nullable(Int64)"}."""
    inner = kind.strip()[len("Tuple("):-1]
    elements, depth, start = {}, 0, 0
    for i, char in enumerate(inner + ","):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            name, _, element = inner[start:i].strip().partition(" ")
            elements[name] = element.strip()
            start = i + 1
    return elements


def out_of_range(table: str, column: str, value: object) -> str | None:
    """`value` outside what `table.column` holds: the message, naming the range; else None."""
    found = bounds(table, column)
    if found is None or found.holds(value):
        return None
    kind = unwrap(schema_columns()[table][column])
    shown = value.isoformat() if isinstance(value, datetime) else repr(value)
    return f"{shown} is outside {table}.{column} ({kind}: {found})"
