"""Typed errors of the runtime package (the runtime never imports the generator).

Every error has a `category`; the `gkr` CLI turns it into the exit code, in one place
(`generator.cli._app.main`), so a library never decides how a process ends.
"""

from __future__ import annotations

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


class ConfigError(RuntimeFailure):
    """A configuration value is wrong; names the source, the field path and what is allowed."""

    category = Category.INVALID_INPUT

    def __init__(self, field: str, message: str, source: str = "config") -> None:
        self.field, self.source = field, source
        super().__init__(f"{source}: {field}: {message}")
