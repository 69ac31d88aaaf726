"""Typed errors of the runtime package (the runtime never imports the generator)."""

from __future__ import annotations


class RuntimeFailure(Exception):
    """Base of every error the runtime reports to a user or an operator."""


class ConfigError(RuntimeFailure):
    """A configuration value is wrong; names the source, the field path and what is allowed."""

    def __init__(self, field: str, message: str, source: str = "config") -> None:
        self.field, self.source = field, source
        super().__init__(f"{source}: {field}: {message}")
