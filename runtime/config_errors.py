"""One adapter from pydantic's ValidationError to GKR's errors: every error, with its dotted
field path and what is allowed.

The runtime's config loaders raise `config_error(...)`; the generator's spec and catalog
loaders build on `field_problems` and add the file line of each field (generator/problems.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from runtime.errors import ConfigError, FieldProblem

# Types pydantic inserts into the location of a union member it tried.
_SCALAR_TAGS = frozenset({"str", "int", "float", "bool"})


def config_error(
    error: ValidationError, source: str, model: type[BaseModel] | None = None
) -> ConfigError:
    """A ConfigError listing every error of `error`; `model` lets unknown fields name the
    allowed ones."""
    return ConfigError(source=source, problems=field_problems(error, model))


def field_problems(
    error: ValidationError, model: type[BaseModel] | None = None
) -> list[FieldProblem]:
    """One problem per pydantic error, in pydantic's order."""
    return [_problem(detail, model) for detail in error.errors()]


def _problem(detail: Any, model: type[BaseModel] | None) -> FieldProblem:
    loc = tuple(part for part in detail["loc"] if not _is_union_tag(part))
    return FieldProblem(".".join(str(part) for part in loc), _message(detail, model), loc)


def _is_union_tag(part: object) -> bool:
    # pydantic inserts the tried type ("str", "function-after[...]") into union locations.
    return isinstance(part, str) and ("[" in part or part in _SCALAR_TAGS)


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
