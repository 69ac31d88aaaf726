"""Where specs live: `jobs/<team>/<name>.yaml`, env files in `env/` folders beside them.

Kept apart from the spec model so that listing spec files (every render does it, for the
cache) needs no pydantic.
"""

from __future__ import annotations

import os
from pathlib import Path

from generator.errors import InvalidInput, Problem
from generator.yamlio import refusal

JOBS_DIR = "jobs"
ENV_DIR = "env"  # env files live in jobs/<team>/env/ (or deeper env/ folders)
SPEC_SUFFIXES = (".yaml", ".yml")
PLACEMENT = "gkr render reads specs only from jobs/<team>/<name>.yaml"


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
