"""Loading job specs from `jobs/<team>/<name>.yaml` files and from command-line flags.

Only `jobs/<team>/<name>.yaml` (or `.yml`) files are specs, and `gkr render` and
`gkr validate PATH` find them with the same function, so they agree on what a spec is; any
other YAML file under jobs/ outside an `env/` folder is reported, never silently skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from generator.errors import InvalidInput, Problem
from generator.problems import problems_from_validation
from generator.spec import JobSpec
from generator.yamlio import FieldPath, LineMap, line_of, load_document, read_input, refusal

JOBS_DIR = "jobs"
ENV_DIR = "env"  # env files live in jobs/<team>/env/ (or deeper env/ folders)
SPEC_SUFFIXES = (".yaml", ".yml")
PLACEMENT = "gkr render reads specs only from jobs/<team>/<name>.yaml"


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


def _lexical(path: Path) -> Path:
    """The absolute path as written, `..` folded but symlinks kept (they are checked when
    the file is read, see yamlio.refusal)."""
    return Path(os.path.normpath(path.absolute()))


def _jobs_parts(path: Path, root: Path) -> tuple[str, ...] | None:
    """The path's parts below jobs/, or None for a path elsewhere."""
    lexical, jobs = _lexical(path), _lexical(root / JOBS_DIR)
    return lexical.relative_to(jobs).parts if lexical.is_relative_to(jobs) else None


def team_of(path: Path, root: Path) -> str | None:
    """The team folder of a spec inside jobs/, or None for a file elsewhere."""
    parts = _jobs_parts(path, root)
    return parts[0] if parts is not None and len(parts) == 2 else None


def display_path(path: Path, root: Path) -> str:
    """How messages name a file: repository-relative when inside it, exactly as named."""
    lexical, top = _lexical(path), _lexical(root)
    return lexical.relative_to(top).as_posix() if lexical.is_relative_to(top) else str(path)


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


def misplaced(parts: tuple[str, ...]) -> str | None:
    """Why a file at jobs/<parts> is not a spec although it looks like one (None: it is a
    spec, or not YAML at all, or an env file)."""
    name = parts[-1]
    if name.startswith(".") or not name.lower().endswith(SPEC_SUFFIXES):
        return None  # hidden files (editor locks, swap files) and non-YAML files
    if not name.endswith(SPEC_SUFFIXES):
        return f"spec files end in lower-case .yaml or .yml; {PLACEMENT}"
    if len(parts) == 2:
        return None
    if len(parts) > 2 and ENV_DIR in parts[1:-1]:
        return None
    return f"{PLACEMENT} (and env files from env/ folders); this file is not read"


def _classify(path: Path, root: Path, found: set[Path], problems: list[Problem]) -> None:
    parts = _jobs_parts(path, root)
    display = display_path(path, root)
    if parts is None or len(parts) < 2:
        problems.append(Problem(display, None, "", f"not a spec: {PLACEMENT}"))
        return
    why = misplaced(parts)
    if why is None and (len(parts) != 2 or not parts[-1].endswith(SPEC_SUFFIXES)
                        or parts[-1].startswith(".")):
        why = f"not a spec: {PLACEMENT}"  # an env file, a hidden or non-YAML file
    if why is not None:
        problems.append(Problem(display, None, "", why))
    else:
        found.add(path)


def _walk(folder: Path, root: Path, found: set[Path], problems: list[Problem]) -> None:
    """Every spec and every misplaced YAML file below a folder (symlinked folders are not
    followed: a spec file may be a symlink inside the repository, a folder may not)."""
    for path in folder.rglob("*"):
        parts = _jobs_parts(path, root)
        if parts is None:
            continue
        if path.is_symlink() and path.is_dir():
            problems.append(Problem(display_path(path, root), None, "",
                                    "a symbolic link to a folder; gkr does not follow it"))
        elif len(parts) == 2 and path.name.endswith(SPEC_SUFFIXES) and path.name[0] != ".":
            found.add(path)  # a directory or dangling link here is reported when read
        elif (path.is_file() or path.is_symlink()) and (why := misplaced(parts)):
            problems.append(Problem(display_path(path, root), None, "", why))


def spec_files(root: Path, paths: list[Path] | None = None) -> list[Path]:
    """Spec files under jobs/ (or under the given files and folders), sorted. A YAML file
    that is not where specs live, or a named path that is not a spec, is an error."""
    found: set[Path] = set()
    problems: list[Problem] = []
    for target in paths or [root / JOBS_DIR]:
        if target.is_dir() and not target.is_symlink():
            before = len(found) + len(problems)
            _walk(target, root, found, problems)
            if paths and len(found) + len(problems) == before:
                problems.append(Problem(display_path(target, root), None, "",
                                        f"holds no spec; {PLACEMENT}"))
        elif target.exists() or target.is_symlink():
            _classify(target, root, found, problems)
        elif paths:
            problems.append(Problem(display_path(target, root), None, "", "not found"))
    # Refused files are reported before anyone reads them: a FIFO would block a reader, and
    # a symlink out of the repository must not even be hashed.
    refused = {path: why for path in found if (why := refusal(path, root)) is not None}
    problems += [Problem(display_path(path, root), None, "", why) for path, why in refused.items()]
    if problems:
        raise InvalidInput(problems)
    return sorted(found)
