"""How commands print: `-o table|json|yaml` for every read command, and diffs.

Tables are kubectl's plain columns when stdout is not a terminal (no box drawing, nothing
cut), times are RFC 3339 in JSON and YAML and ages in tables, and an empty list says
"No resources found" on stderr, as kubectl does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

import typer

from generator.cli._app import color, err_console, out_console


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[Output, typer.Option("-o", "--output", help="table, json or yaml.")]
Columns = Sequence[str] | Mapping[str, str]
"""Keys of a row to show, in order; a mapping gives each key its header."""


def emit(rows: list[dict[str, Any]], output: Output, columns: Columns | None = None, *,
         title: str = "", empty: str = "No resources found") -> None:
    """Print rows as JSON, YAML, or a table of `columns` (default: the first row's keys)."""
    if output is not Output.table:
        _print_data([_data(row) for row in rows], output)
    elif not rows:
        err_console.print(empty)
    else:
        headers = _headers(columns or list(rows[0]))
        cells = [[_cell(row.get(key)) for key in headers] for row in rows]
        if out_console.is_terminal():
            _rich_table(list(headers.values()), cells, title)
        else:
            _plain_table(list(headers.values()), cells)


def _print_data(rows: list[Any], output: Output) -> None:
    if output is Output.json:
        import json

        print(json.dumps(rows, indent=2))
    else:
        import yaml

        # Like json.dumps' ensure_ascii: control, bidi and other invisible characters (agent
        # text, names from a cluster) reach the terminal as escapes, never raw.
        print(yaml.safe_dump(rows, sort_keys=False, allow_unicode=False), end="")


def _data(value: Any) -> Any:
    """JSON-ready data: times as RFC 3339 strings (UTC, `Z`), everything else as it is."""
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, dict):
        return {str(k): _data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_data(v) for v in value]
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def rfc3339(moment: datetime) -> str:
    """`2024-05-01T10:00:00Z`: UTC, whole seconds, as Kubernetes writes its timestamps."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _headers(columns: Columns) -> dict[str, str]:
    if isinstance(columns, Mapping):
        return dict(columns)
    return {key: key.replace("_", " ").upper() for key in columns}


def _cell(value: Any) -> str:
    """One line per cell, as kubectl: lists joined by commas, times as ages."""
    if isinstance(value, list):  # e.g. an incident's steps
        return ", ".join(str(v.get("what", v)) if isinstance(v, dict) else str(v) for v in value)
    if isinstance(value, datetime):
        return age(value)
    return "" if value is None else " ".join(str(value).split())


def age(moment: datetime, now: datetime | None = None) -> str:
    """Age as kubectl prints it: 42s, 7m, 3h12m, 2d4h."""
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"


def _plain_table(headers: list[str], cells: list[list[str]]) -> None:
    """kubectl's columns: left-aligned, three spaces apart, no truncation, no trailing blanks."""
    widths = [max(len(row[i]) for row in [headers, *cells]) for i in range(len(headers))]
    for row in [headers, *cells]:
        line = "   ".join(text.ljust(width) for text, width in zip(row, widths, strict=True))
        out_console.print(line.rstrip())


def _rich_table(headers: list[str], cells: list[list[str]], title: str) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(*headers, title=title or None)
    for row in cells:
        table.add_row(*[Text(cell) for cell in row])  # Text: never read as markup
    out_console.print(table)


def print_diff(text: str) -> None:
    """A unified diff exactly as `git apply` reads it: never wrapped or cut; on a terminal,
    `-` and `+` lines are coloured."""
    stream = out_console.stream
    if not stream.isatty():
        stream.write(text if text.endswith("\n") or not text else text + "\n")
        return
    for line in text.splitlines():
        code = {"+": "32", "-": "31", "@": "36"}.get(line[:1], "")
        stream.write((color(line, code, stream) if code else line) + "\n")
