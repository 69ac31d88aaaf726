"""Turn pydantic validation errors into located, readable problems: the runtime's adapter
(runtime/config_errors.py) gives each error's field path and message; this adds the file
and the line of the field (or its parent)."""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from generator.errors import Problem
from generator.yamlio import LineMap, line_of
from runtime.config_errors import field_problems


def problems_from_validation(
    error: ValidationError, display: str, lines: LineMap, model: type[BaseModel] | None = None
) -> list[Problem]:
    """One problem per pydantic error, with the line of the field (or its parent)."""
    return [Problem(display, line_of(lines, found.loc), found.field, found.message)
            for found in field_problems(error, model)]
