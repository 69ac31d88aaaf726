"""`-o table|json|yaml` for every read command: one option, one printer."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from rich.table import Table

from generator.cli._app import out_console


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[Output, typer.Option("-o", "--output", help="table, json or yaml.")]


def emit(rows: list[dict[str, Any]], output: Output, columns: list[str] | None = None, *,
         title: str = "") -> None:
    """Print rows as JSON, YAML, or a table of `columns` (default: the first row's keys)."""
    if output is Output.json:
        print(json.dumps(rows, indent=2, default=str))
    elif output is Output.yaml:
        print(yaml.safe_dump(rows, sort_keys=False), end="")
    else:
        columns = columns or (list(rows[0]) if rows else ["(none)"])
        table = Table(*[c.replace("_", " ") for c in columns], title=title or None)
        for row in rows:
            table.add_row(*[_cell(row.get(c)) for c in columns])
        out_console.print(table)


def _cell(value: Any) -> str:
    if isinstance(value, list):  # e.g. an incident's steps: one per line
        return "\n".join(str(v.get("what", v)) if isinstance(v, dict) else str(v) for v in value)
    return "" if value is None else str(value)
