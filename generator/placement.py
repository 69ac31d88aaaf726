"""Where specs live: `jobs/<team>/<name>.yaml`, env files in `env/` folders beside them.

Kept apart from the spec model so that listing spec files (every render does it, for the
cache) needs no pydantic.
"""

from __future__ import annotations

import os
from pathlib import Path

from generator.errors import InvalidInput, Problem
from generator.yamlio import MAX_BYTES, refusal

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


class _Walk:
    """Spec discovery for one call of `spec_files`, on strings and `os.scandir` entries: a
    repository of 1,000 specs is listed on every render, and `Path` objects, `Path.resolve`
    and repeated stats per file cost more than the render of one changed spec.

    A regular file (not a link) met by the walk, in folders entered without following links,
    is vetted here with what `refusal` would check: inside the repository as written and as
    resolved (its folder's real path is known: the walk's start, resolved once, plus real
    folder names), and not too large. Anything else found (a link, a folder named like a
    spec, a FIFO) goes through `refusal` itself."""

    def __init__(self, root: Path, found: set[Path], problems: list[Problem]) -> None:
        self.root, self.found, self.problems = root, found, problems
        self.jobs = os.path.normpath(os.path.abspath(root / JOBS_DIR))
        # What `refusal` tests a path against: the root as given and as resolved.
        self.tops = (_prefix(str(root.absolute())), _prefix(str(root.resolve())))
        self.vetted: set[Path] = set()

    def _parts(self, lexical: str) -> tuple[str, ...] | None:
        if lexical == self.jobs:
            return ()
        if lexical.startswith(_prefix(self.jobs)):
            return tuple(lexical[len(self.jobs) + 1:].split("/"))
        return None

    def walk(self, folder: Path) -> None:
        """Every spec and every misplaced YAML file below a folder (symlinked folders are not
        followed: a spec file may be a symlink inside the repository, a folder may not)."""
        lexical = os.path.normpath(os.path.abspath(folder))
        self._folder(str(folder), lexical, os.path.realpath(folder))

    def _folder(self, written: str, lexical: str, real: str) -> None:
        try:
            with os.scandir(written) as listing:
                entries = list(listing)
        except PermissionError:  # as `Path.rglob` did: a folder that may not be listed
            return
        base, lexical, real = _prefix(written), _prefix(lexical), _prefix(real)
        parts = self._parts(lexical[:-1] or "/")
        # `refusal`'s "inside the repository" checks, as written and as resolved, for every
        # file of this folder at once (a name holds no "/": below `top` iff the folder is).
        inside = lexical.startswith(self.tops) and real.startswith(self.tops[1])
        subfolders: list[tuple[str, str, str]] = []
        for entry in entries:
            name = entry.name
            child_parts = (*parts, name) if parts is not None else self._parts(lexical + name)
            is_folder = _is_folder(entry)
            if is_folder:
                subfolders.append((base + name, lexical + name, real + name))
            if child_parts is not None:
                self._entry(entry, base + name, child_parts, is_folder, inside)
        for folder in subfolders:
            self._folder(*folder)

    def _entry(self, entry: os.DirEntry[str], path: str, parts: tuple[str, ...],
               is_folder: bool, inside: bool) -> None:
        name, link = entry.name, entry.is_symlink()
        if link and Path(path).is_dir():  # a link: the rare case, asked as `Path` would
            self.problems.append(Problem(display_path(Path(path), self.root), None, "",
                                         "a symbolic link to a folder; gkr does not follow it"))
        elif len(parts) == 2 and name.endswith(SPEC_SUFFIXES) and name[0] != ".":
            found = Path(path)  # a directory or dangling link here is reported when read
            self.found.add(found)
            if inside and not (link or is_folder) and _is_file(entry) and _small(entry):
                self.vetted.add(found)
        elif parts and (link or _is_file(entry)) and (why := misplaced(parts)):
            self.problems.append(Problem(display_path(Path(path), self.root), None, "", why))

    def refusal(self, path: Path) -> str | None:
        return None if path in self.vetted else refusal(path, self.root)


def _prefix(folder: str) -> str:
    """What the paths strictly below `folder` start with."""
    return folder.rstrip("/") + "/"


def _is_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _small(entry: os.DirEntry[str]) -> bool:
    """Not over `refusal`'s size bound (False also when it cannot be told: ask `refusal`)."""
    try:
        return entry.stat(follow_symlinks=False).st_size <= MAX_BYTES
    except OSError:
        return False


def _is_file(entry: os.DirEntry[str]) -> bool:
    """A regular file, not a link (from the folder listing: no system call on Linux)."""
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def spec_files(root: Path, paths: list[Path] | None = None) -> list[Path]:
    """Spec files under jobs/ (or under the given files and folders), sorted. A YAML file
    that is not where specs live, or a named path that is not a spec, is an error."""
    found: set[Path] = set()
    problems: list[Problem] = []
    walk = _Walk(root, found, problems)
    for target in paths or [root / JOBS_DIR]:
        if target.is_dir() and not target.is_symlink():
            before = len(found) + len(problems)
            walk.walk(target)
            if paths and len(found) + len(problems) == before:
                problems.append(Problem(display_path(target, root), None, "",
                                        f"holds no spec; {PLACEMENT}"))
        elif target.exists() or target.is_symlink():
            _classify(target, root, found, problems)
        elif paths:
            problems.append(Problem(display_path(target, root), None, "", "not found"))
    # Refused files are reported before anyone reads them: a FIFO would block a reader, and
    # a symlink out of the repository must not even be hashed.
    refused = {path: why for path in found if (why := walk.refusal(path)) is not None}
    problems += [Problem(display_path(path, root), None, "", why) for path, why in refused.items()]
    if problems:
        raise InvalidInput(problems)
    return sorted(found, key=_order)


def _order(path: Path) -> tuple[str, ...]:
    """`Path`'s own order (by parts), one key per path rather than a comparison of parts
    per pair of paths."""
    return path.parts
