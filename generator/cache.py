"""A content-addressed cache of the rendered tree (`.gkr/cache/render/`, ignored by git), so
that a render after one spec changes costs one spec's work, and a render after none costs
little more than reading the specs.

One folder per fingerprint of the inputs every job shares (catalog files, generator code);
a change to any of them starts a new folder. In it:

* `index`: what writing the tree needs of every cached job, keyed by its spec file's path
  and bytes: the output path and text, and the hashes of the other inputs it read (its env
  file). Plain strings in one file, because `gkr render` reads all of it every time.
* `jobs/<key>`: what only checks read (the checked spec, its documents), one file per job,
  read on demand.
* `catalog`: the files that the catalog alone decides (base, platform, Terraform, Warden).

Only valid output is cached, so errors are always recomputed. The cache is disposable: an
unreadable or missing file is a miss, and a failed write is ignored.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

CACHE_DIR = ".gkr/cache/render"
# Where the catalog lives; every file below these folders is an input of every job. This is
# a superset of `Catalog.files()` (tests/generator/test_render_cache.py checks it), kept
# here so that finding the cache does not import the catalog's models.
CATALOG_DIRS = ("platform/catalog", "clusters")


def digest(*chunks: bytes) -> str:
    hasher = hashlib.sha256()
    for chunk in chunks:
        hasher.update(len(chunk).to_bytes(8, "little"))
        hasher.update(chunk)
    return hasher.hexdigest()


def read_own(path: Path) -> bytes | None:
    """A regular file's bytes, or None for anything else: a symbolic link (not followed, so
    a linked input is never served from the cache and the loader's checks of where it points
    always run), a folder, a FIFO (opened without blocking), a missing file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return handle.read()


def file_digest(path: Path) -> str | None:
    """The hash of a regular file; None for anything else, which is never taken as fresh."""
    data = read_own(path)
    return digest(data) if data is not None else None


class Summary(NamedTuple):
    """What writing the tree needs of one cached job."""

    path: str
    text: str
    source: str
    dependencies: dict[str, str | None]

    def fresh(self) -> bool:
        return all(h is not None and file_digest(Path(p)) == h
                   for p, h in self.dependencies.items())


class Details(NamedTuple):
    """What only checks need of one cached job: enough to rebuild its resolved job."""

    spec: Any
    team: str | None
    user_env: dict[str, str]
    documents: list[dict[str, Any]]


def load_pickle(path: Path) -> Any | None:
    """A cached object, or None when it is missing or unreadable (the cache is disposable)."""
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError,
            ImportError, IndexError, TypeError):
        return None


def store_pickle(path: Path, value: Any) -> None:
    """Write atomically, so that a concurrent reader sees the old object or the new one; a
    cache that cannot be written (read-only checkout, full disk) is simply not kept."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(name, path)
    except OSError:
        Path(name).unlink(missing_ok=True)


def store_details(folder: Path, key: str, details: Details) -> None:
    store_pickle(folder / "jobs" / key, details)


def _content(path: Path, root: Path) -> bytes:
    """What a fingerprint hashes of an input: its bytes, or its link target's bytes when that
    stays in the repository (the loaders refuse the others, and FIFOs are never read)."""
    data = read_own(path)
    if data is None and path.is_symlink() and path.resolve().is_relative_to(root.resolve()):
        data = read_own(path.resolve())
    return data if data is not None else f"not a file: {os.path.realpath(path)}".encode()


def catalog_inputs(root: Path) -> list[Path]:
    return sorted(p for folder in CATALOG_DIRS if (root / folder).is_dir()
                  for p in (root / folder).rglob("*") if not p.is_dir())


class RenderCache:
    """The cache folder of one fingerprint; callers save it while holding the tree's lock."""

    def __init__(self, root: Path, inputs: list[Path] | None = None) -> None:
        self.base = root / CACHE_DIR
        files = (catalog_inputs(root) if inputs is None else inputs) + _generator_files()
        self.fingerprint = digest(*(part for p in files
                                    for part in (p.as_posix().encode(), _content(p, root))))
        self.folder = self.base / self.fingerprint[:32]
        self.index: dict[str, Summary] = load_pickle(self.folder / "index") or {}
        self.used: set[str] = set()
        self.new: dict[str, Details] = {}
        self.new_catalog_part: Any | None = None
        self.changed = False

    def get(self, key: str) -> Summary | None:
        summary = self.index.get(key)
        if summary is None or not summary.fresh():
            return None
        self.used.add(key)
        return summary

    def details(self, key: str) -> Details | None:
        found = self.new.get(key) or load_pickle(self.folder / "jobs" / key)
        return found if isinstance(found, Details) else None

    def put(self, key: str, summary: Summary, details: Details | None) -> None:
        """Add a job; `details` None when a render worker stored them already."""
        self.index[key] = summary
        self.used.add(key)
        self.changed = True
        if details is not None:
            self.new[key] = details

    def catalog_part(self) -> Any | None:
        return load_pickle(self.folder / "catalog")

    def put_catalog_part(self, part: Any) -> None:
        self.new_catalog_part = part

    def save(self) -> None:
        """Write what is new; drop entries and fingerprints no longer used. A render that
        found everything cached writes nothing."""
        if self.new_catalog_part is not None:
            store_pickle(self.folder / "catalog", self.new_catalog_part)
        if not self.changed and self.used == self.index.keys():
            return
        for key, details in self.new.items():
            store_details(self.folder, key, details)
        store_pickle(self.folder / "index", {k: self.index[k] for k in sorted(self.used)})
        for stale in _listing(self.folder / "jobs"):
            if stale.name not in self.used:
                stale.unlink(missing_ok=True)
        for other in _listing(self.base):
            if other != self.folder:
                shutil.rmtree(other, ignore_errors=True)


def _listing(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _generator_files() -> list[Path]:
    import generator

    package = Path(generator.__file__).parent
    return sorted(p for p in package.rglob("*") if p.suffix in {".py", ".j2", ".json"})
