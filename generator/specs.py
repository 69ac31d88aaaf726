"""Loading job specs from `jobs/<team>/<name>.yaml` files and from command-line flags.

Only `jobs/<team>/<name>.yaml` (or `.yml`) files are specs, and `gkr render` and
`gkr validate PATH` find them with the same function, so they agree on what a spec is; any
other YAML file under jobs/ outside an `env/` folder is reported, never silently skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from generator.errors import InvalidInput, Problem
from generator.placement import display_path, team_of
from generator.problems import problems_from_validation
from generator.spec import JobSpec
from generator.yamlio import FieldPath, LineMap, line_of, load_document, read_input

# Spec fields `gkr submit` takes as arguments; every other field is the option `--<field>`.
ARGUMENTS = {"name": "NAME", "kind": "KIND"}


def flag_name(field: str) -> str:
    """How the command line spells a spec field, for problems in values given there."""
    return ARGUMENTS.get(field) or f"--{field.replace('_', '-')}"


@dataclass(frozen=True)
class SpecSource:
    """Where a spec came from, to locate its problems: a file (with lines) or flags."""

    display: str
    path: Path | None = None
    lines: LineMap = field(default_factory=dict)
    team: str | None = None
    flags: frozenset[str] = frozenset()
    root: Path | None = None
    """The repository the spec belongs to: the files it names must stay inside it."""

    def problem(self, path: FieldPath, message: str) -> Problem:
        name = ".".join(str(part) for part in path)
        if path and path[0] in self.flags:
            return Problem("command line", None, flag_name(str(path[0])), message)
        return Problem(self.display, line_of(self.lines, path), name, message)


@dataclass(frozen=True)
class LoadedSpec:
    spec: JobSpec
    source: SpecSource


def load_spec(path: Path, root: Path, flags: dict[str, Any] | None = None) -> LoadedSpec:
    """Read a spec file; values given as flags override the file's (seed §2.2). A file inside
    the repository must resolve inside it; one outside was named on the command line."""
    display = display_path(path, root)
    data, lines = load_document(display, read_input(path, root, display, anywhere=True))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidInput([Problem(display, 1, "", "a job spec must be a YAML mapping")])
    data.setdefault("name", path.stem)
    source = SpecSource(display, path, lines, team_of(path, root), frozenset(flags or {}), root)
    return LoadedSpec(build_spec({**data, **(flags or {})}, source), source)


def spec_from_flags(flags: dict[str, Any]) -> LoadedSpec:
    """A spec given entirely on the command line (`gkr submit NAME KIND --pods …`)."""
    source = SpecSource("command line", flags=frozenset(flags))
    return LoadedSpec(build_spec(flags, source), source)


def build_spec(data: dict[str, Any], source: SpecSource) -> JobSpec:
    try:
        return JobSpec.model_validate(data)
    except ValidationError as error:
        problems = problems_from_validation(error, source.display, source.lines, JobSpec)
        raise InvalidInput([_relocate(p, source) for p in problems]) from None


def _relocate(problem: Problem, source: SpecSource) -> Problem:
    """Problems in fields that came from flags point at the command line."""
    head = problem.field.split(".")[0]
    if head in source.flags:
        return Problem("command line", None, flag_name(head), problem.message)
    return problem


