"""Typed errors of the runtime package (the runtime never imports the generator).

Every error has a `category`; the `gkr` CLI turns it into the exit code, in one place
(`generator.cli._app.main`), so a library never decides how a process ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


class Category(IntEnum):
    """What went wrong, as the exit code the README documents for it."""

    INVALID_INPUT = 1  # a spec, catalog, config or flag is wrong, or the object named is absent
    STALE = 3  # the committed rendered tree differs from a fresh render
    SERVICE = 4  # a tool or service the command needs failed or timed out
    CHECK = 5  # a check ran and found a fault


class RuntimeFailure(Exception):
    """Base of every error the runtime reports to a user or an operator."""

    category = Category.SERVICE


@dataclass(frozen=True)
class FieldProblem:
    """One wrong value of a configuration: its dotted field path and what is allowed."""

    field: str  # "" when the whole input is wrong
    message: str
    loc: tuple[str | int, ...] = ()  # the path as keys and indexes, where known (for lines)

    def located(self, source: str) -> str:
        return f"{source}: {self.field}: {self.message}" if self.field else \
            f"{source}: {self.message}"


class ConfigError(RuntimeFailure):
    """A configuration is wrong; names the source and, for every wrong value, its field path
    and what is allowed (`problems`; `field` and `message` are the first one's)."""

    category = Category.INVALID_INPUT

    def __init__(self, field: str = "", message: str = "", source: str = "config",
                 problems: Sequence[FieldProblem] = ()) -> None:
        self.source = source
        self.problems = tuple(problems) or (FieldProblem(field, message),)
        self.field, self.message = self.problems[0].field, self.problems[0].message
        super().__init__("\n".join(problem.located(source) for problem in self.problems))

    def __reduce__(self) -> tuple[object, ...]:
        # Ray and multiprocessing pickle errors across processes: rebuild from the fields.
        return type(self), (self.field, self.message, self.source, self.problems)
