"""Loading job specs from `jobs/<team>/<name>.yaml` files and from command-line flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from generator.errors import InvalidInput, Problem
from generator.problems import problems_from_validation
from generator.spec import JobSpec
from generator.yamlio import FieldPath, LineMap, line_of, load_document

JOBS_DIR = "jobs"


@dataclass(frozen=True)
class SpecSource:
    """Where a spec came from, to locate its problems: a file (with lines) or flags."""

    display: str
    path: Path | None = None
    lines: LineMap = field(default_factory=dict)
    team: str | None = None
    flags: frozenset[str] = frozenset()

    def problem(self, path: FieldPath, message: str) -> Problem:
        name = ".".join(str(part) for part in path)
        if path and path[0] in self.flags:
            return Problem("command line", None, f"--{str(path[0]).replace('_', '-')}", message)
        return Problem(self.display, line_of(self.lines, path), name, message)


@dataclass(frozen=True)
class LoadedSpec:
    spec: JobSpec
    source: SpecSource


def team_of(path: Path, root: Path) -> str | None:
    """The team folder of a spec inside jobs/, or None for a file elsewhere."""
    jobs = root / JOBS_DIR
    if not path.is_relative_to(jobs):  # cheap check first: most paths come from rglob(jobs)
        path, jobs = path.resolve(), jobs.resolve()
        if not path.is_relative_to(jobs):
            return None
    parts = path.relative_to(jobs).parts
    return parts[0] if len(parts) == 2 else None


def load_spec(path: Path, root: Path, flags: dict[str, Any] | None = None) -> LoadedSpec:
    """Read a spec file; values given as flags override the file's (seed §2.2)."""
    display = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    if not path.is_file():
        raise InvalidInput([Problem(display, None, "", "spec file not found")])
    data, lines = load_document(path, display)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidInput([Problem(display, 1, "", "a job spec must be a YAML mapping")])
    data.setdefault("name", path.stem)
    source = SpecSource(display, path, lines, team_of(path, root), frozenset(flags or {}))
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
        return Problem("command line", None, f"--{head.replace('_', '-')}", problem.message)
    return problem


def spec_files(root: Path, paths: list[Path] | None = None) -> list[Path]:
    """Spec files under jobs/ (or under the given files and folders), sorted."""
    targets = paths or [root / JOBS_DIR]
    found: set[Path] = set()
    for target in targets:
        if not target.exists() and target == root / JOBS_DIR:
            continue
        if target.is_dir():
            # Only jobs/<team>/<name>.yaml are specs; deeper files (env files) are not.
            found.update(p for p in target.rglob("*")
                         if p.suffix in {".yaml", ".yml"} and team_of(p, root) is not None)
        else:
            found.add(target)
    return sorted(found)
