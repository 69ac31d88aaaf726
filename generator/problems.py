"""Turn pydantic validation errors into located, readable problems."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from generator.errors import Problem
from generator.yamlio import LineMap, line_of


def problems_from_validation(
    error: ValidationError, display: str, lines: LineMap, model: type[BaseModel] | None = None
) -> list[Problem]:
    """One problem per pydantic error, with the line of the field (or its parent)."""
    return [_problem(detail, display, lines, model) for detail in error.errors()]


def _problem(
    detail: Any, display: str, lines: LineMap, model: type[BaseModel] | None
) -> Problem:
    loc = tuple(part for part in detail["loc"] if not _is_union_tag(part))
    field = ".".join(str(part) for part in loc)
    return Problem(display, line_of(lines, loc), field, _message(detail, model))


def _is_union_tag(part: object) -> bool:
    # pydantic inserts the tried type ("str", "function-after[...]") into union locations.
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool"})


def _message(detail: Any, model: type[BaseModel] | None) -> str:
    kind, msg = detail["type"], detail["msg"]
    if kind == "extra_forbidden":
        allowed = _allowed_fields(model, detail["loc"][:-1])
        return "unknown field" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        return f"got {detail['input']!r}; {msg[0].lower()}{msg[1:]}"
    if msg.startswith("Value error, "):
        msg = msg.removeprefix("Value error, ")
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"got {detail['input']!r}: {msg[0].lower()}{msg[1:]}"
    return msg[0].lower() + msg[1:] if msg else kind


def _allowed_fields(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """Field names of the (nested) model at `loc`, for 'unknown field' messages."""
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return []
        annotation = model.model_fields[part].annotation
        candidates = [a for a in getattr(annotation, "__args__", (annotation,))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
        model = candidates[0] if candidates else None
    return sorted(model.model_fields) if model else []
