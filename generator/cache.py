"""A content-addressed cache of the rendered tree (`.gkr/cache/render/`, ignored by git), so
that a render after one spec changes costs one spec's work, and a render after none costs
little more than reading the specs.

One folder per fingerprint of the inputs every job shares (catalog files, generator code);
a change to any of them starts a new folder. In it:

* `index`: what writing the tree needs of every cached job, keyed by its spec file's path
  and bytes: the output path and text, and the hashes of the other inputs it read (its env
  file). Plain strings in one file, because `gkr render` reads all of it every time.
* `index.delta`: the entries added to and removed from `index` since it was written. A
  render after a few spec changes writes this small file, not the whole index (megabytes
  for a thousand jobs); once it holds many entries, the index is written whole again.
* `jobs/<key>`: what only checks read (the checked spec, its documents), one file per job,
  read on demand.
* `catalog`: the files that the catalog alone decides (base, platform, Terraform, Warden).
* `kustomizations`: the text of each kustomization.yaml, by the hash of what it lists.

Only valid output is cached, so errors are always recomputed. The cache is disposable: an
unreadable or missing file is a miss, and a failed write is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import shutil
import stat
from pathlib import Path
from typing import Any, NamedTuple

CACHE_DIR = ".gkr/cache/render"
# Where the catalog lives; every file below these folders is an input of every job. This is
# a superset of `Catalog.files()` (tests/generator/test_render_cache.py checks it), kept
# here so that finding the cache does not import the catalog's models.
CATALOG_DIRS = ("platform/catalog", "clusters")
# `index.delta` is folded into `index` once it holds more entries than this (or than a
# sixteenth of the index).
DELTA_ENTRIES = 32


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
    try:  # plain reads: every render hashes every spec
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            return None
        chunks = [os.read(fd, status.st_size + 1)]
        while chunks[-1]:  # to the end, should the file have grown
            chunks.append(os.read(fd, 1 << 16))
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def file_digest(path: Path) -> str | None:
    """The hash of a regular file; None for anything else, which is never taken as fresh."""
    data = read_own(path)
    return digest(data) if data is not None else None


class Summary(NamedTuple):
    """What writing the tree needs of one cached spec: its job's file, and the files of the
    other jobs it renders to (a DiLoCo experiment's, `generator.experiments`)."""

    path: str
    text: str
    source: str
    dependencies: dict[str, str | None]
    parts: tuple[tuple[str, str], ...] = ()  # (path, text) of each other job
    images: tuple[tuple[str, ...], ...] = ()  # the images each file's pods name, in order

    def fresh(self) -> bool:
        return all(h is not None and file_digest(Path(p)) == h
                   for p, h in self.dependencies.items())


class Details(NamedTuple):
    """What only checks need of one cached spec: enough to rebuild its resolved jobs."""

    spec: Any
    team: str | None
    user_env: dict[str, str]
    documents: list[dict[str, Any]]
    parts: tuple[list[dict[str, Any]], ...] = ()  # the documents of each other job


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
    name = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(name, path)
    except OSError:
        name.unlink(missing_ok=True)


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
        index = load_pickle(self.folder / "index")
        self.index: dict[str, Summary] = index if isinstance(index, dict) else {}
        self.indexed = set(self.index)
        """The keys of the `index` file, which `index.delta` changes."""
        _apply(self.index, load_pickle(self.folder / "index.delta"))
        self.used: set[str] = set()
        self.new: dict[str, Details] = {}
        self.new_catalog_part: Any | None = None
        self._kustomizations: dict[str, str] | None = None
        self.kustomizations_used: dict[str, str] = {}
        self.kustomizations_changed = False
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

    def kustomization(self, key: str) -> str | None:
        """A kustomization.yaml's text by the hash of what it lists (None: not cached)."""
        if self._kustomizations is None:
            found = load_pickle(self.folder / "kustomizations")
            self._kustomizations = found if isinstance(found, dict) else {}
        text = self._kustomizations.get(key)
        if isinstance(text, str):
            self.kustomizations_used[key] = text
            return text
        return None

    def put_kustomization(self, key: str, text: str) -> None:
        self.kustomizations_used[key] = text
        self.kustomizations_changed = True

    def save(self) -> None:
        """Write what is new; drop entries and fingerprints no longer used. A render that
        found everything cached writes nothing."""
        if self.new_catalog_part is not None:
            store_pickle(self.folder / "catalog", self.new_catalog_part)
        if self.kustomizations_changed:
            store_pickle(self.folder / "kustomizations", self.kustomizations_used)
        if not self.changed and self.used == self.index.keys():
            return
        for key, details in self.new.items():
            store_details(self.folder, key, details)
        self._store_index()
        jobs = self.folder / "jobs"
        for stale in _listing(jobs):
            if stale not in self.used:
                (jobs / stale).unlink(missing_ok=True)
        for other in _listing(self.base):
            if other != self.folder.name:
                shutil.rmtree(self.base / other, ignore_errors=True)

    def _store_index(self) -> None:
        """The used entries: as a delta from the `index` file while that stays small (an
        entry is the same wherever it is kept: its key is the hash of its inputs)."""
        added = {k: self.index[k] for k in sorted(self.used - self.indexed)}
        removed = sorted(self.indexed - self.used)
        if len(added) + len(removed) <= max(DELTA_ENTRIES, len(self.indexed) // 16):
            store_pickle(self.folder / "index.delta", (added, removed))
            return
        store_pickle(self.folder / "index", {k: self.index[k] for k in sorted(self.used)})
        self.indexed = set(self.used)
        with contextlib.suppress(OSError):  # a delta left behind changes nothing it holds
            (self.folder / "index.delta").unlink(missing_ok=True)


def _apply(index: dict[str, Summary], delta: Any) -> None:
    """Change `index` by a delta read from `index.delta` (ignored unless well-formed)."""
    if not (isinstance(delta, tuple) and len(delta) == 2 and isinstance(delta[0], dict)
            and isinstance(delta[1], list)):
        return
    index.update(delta[0])
    for key in delta[1]:
        index.pop(key, None)


def _listing(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _generator_files() -> list[Path]:
    import generator

    package = Path(generator.__file__).parent
    return sorted(p for p in package.rglob("*") if p.suffix in {".py", ".j2", ".json"})
