"""The folders of a diagnosing agent's workspace (see runtime.crash.agent)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runtime.crash.report import SCHEMA, schema_text

PROMPT = "prompt.md"


@dataclass(frozen=True)
class Layout:
    """The folders and files of one workspace."""

    root: Path

    @property
    def bundle(self) -> Path:
        return self.root / "bundle"

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def out(self) -> Path:
        return self.root / "out"

    @property
    def prompt(self) -> Path:
        return self.root / PROMPT

    @property
    def schema(self) -> Path:
        return self.root / SCHEMA

    @property
    def home(self) -> Path:
        return self.root / "home"

    def make(self) -> Layout:
        """Create the folders, and the schema file the prompt points to."""
        for folder in (self.bundle, self.out, self.home, self.root / "tmp"):
            folder.mkdir(parents=True, exist_ok=True)
        self.schema.write_text(schema_text() + "\n")
        return self
