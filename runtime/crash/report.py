"""What a diagnosing agent answers: a structured report, checked before anyone reads it.

The agent writes `report.json` (this model; `report.schema.json` in its workspace is the JSON
Schema) and may write its fix as `patch.diff` beside it, a diff that `git apply` reads; locally
gkr also takes the fix from the agent's edits of the checkout. Nothing in a report is applied
until a person approves it (`gkr diagnose approve`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runtime.config_errors import config_error
from runtime.errors import ConfigError

REPORT = "report.json"
PATCH = "patch.diff"
SCHEMA = "report.schema.json"
# A Hydra override: key=value, optionally added (+), forced (++) or deleted (~).
_OVERRIDE = re.compile(r"^(\+\+|\+|~)?[A-Za-z_][\w.@/-]*(=.*)?$", re.DOTALL)
# What a relaunch sets itself, so that it continues the failed run: not the agent's to change.
RESERVED = ("run.name", "checkpoint.uri", "checkpoint.resume_from", "telemetry.dsn", "crash.uri")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Evidence(_Model):
    """One observation supporting the root cause, and where anyone can check it."""

    claim: str = Field(min_length=1)
    """What it shows."""
    source: str = Field(min_length=1)
    """Where: a file of the bundle (`bundle/logs/rank-1.err`, with `:LINE` where it helps), a
    file of the code (`code/...`), `query:<name>` for a query below, or a command run."""
    excerpt: str = ""
    """The lines that show it, copied."""


class QueryUsed(_Model):
    """A telemetry query the agent ran, and what it found."""

    name: str = Field(min_length=1)
    """How the evidence refers to it (`query:<name>`)."""
    sql: str = Field(min_length=1)
    """The query as run."""
    parameters: dict[str, str] = Field(default_factory=dict)
    """Its parameters (`run`, ...)."""
    finding: str = ""
    """What its rows showed."""


class DiagnosisReport(_Model):
    """Root cause, evidence, and a proposed fix of one failed run."""

    version: Literal[1] = 1
    """Version of this format."""
    run: str = Field(min_length=1)
    """The run diagnosed (its id, as in the bundle)."""
    root_cause: str = Field(min_length=1)
    """Why the run failed, in a few sentences."""
    category: Literal["code", "config", "data", "infrastructure", "unknown"]
    """Where the fault lies."""
    evidence: list[Evidence] = Field(min_length=1)
    """What supports the root cause."""
    queries: list[QueryUsed] = Field(default_factory=list)
    """The telemetry queries run."""
    patch: str | None = None
    """File name (beside the report) of the fix as a git diff; None: no code change, or the
    changes the agent made in its checkout (taken by gkr locally)."""
    overrides: list[str] = Field(default_factory=list)
    """Config overrides (Hydra syntax) the relaunch should add, e.g. `model.lr=1e-3`."""
    spec_change: str = ""
    """A change to the job spec, in words (a spec edit itself goes in the patch)."""
    reproduced: bool = False
    """Whether a short local reproduction showed the failure."""
    confidence: Literal["low", "medium", "high"] = "medium"
    """How sure the agent is."""

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, values: list[str]) -> list[str]:
        for value in values:
            if not _OVERRIDE.match(value):
                raise ValueError(f"{value!r} is not a Hydra override (key=value, +key=value, "
                                 "~key)")
            key = value.lstrip("+~").split("=", 1)[0]
            if key in RESERVED or any(key.startswith(f"{name}.") for name in RESERVED):
                raise ValueError(f"{value!r}: the relaunch sets {key} itself (it continues the "
                                 "failed run's checkpoints and telemetry)")
        return values

    @field_validator("patch")
    @classmethod
    def _patch_beside(cls, value: str | None) -> str | None:
        if value is not None and ("/" in value or value.startswith(".")):
            raise ValueError(f"{value!r}: name a file beside report.json, e.g. patch.diff")
        return value


def parse_report(text: str | bytes, source: str = REPORT) -> DiagnosisReport:
    """A report from its JSON; a wrong one is a ConfigError naming each field and what is
    allowed."""
    try:
        data: Any = json.loads(text)
    except ValueError as error:
        raise ConfigError("", f"not JSON: {error}", source) from None
    try:
        return DiagnosisReport.model_validate(data)
    except ValidationError as error:
        raise config_error(error, source, DiagnosisReport) from error


def schema_text() -> str:
    """The JSON Schema an agent gets beside its prompt."""
    return json.dumps(DiagnosisReport.model_json_schema(), indent=2)
