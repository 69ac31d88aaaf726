"""A content-addressed cache of rendered jobs, so that re-rendering after one spec changes
costs one spec's work (`.gkr/cache/render/`, ignored by git).

An entry is keyed by the spec file's bytes and remembers the hashes of the other inputs it
read (its env file); the whole cache is dropped when any catalog file, template or
generator module changes. Only valid jobs are cached, so errors are always recomputed.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import generator

CACHE_DIR = ".gkr/cache/render"


def digest(*chunks: bytes) -> str:
    hasher = hashlib.sha256()
    for chunk in chunks:
        hasher.update(len(chunk).to_bytes(8, "little"))
        hasher.update(chunk)
    return hasher.hexdigest()


def file_digest(path: Path) -> str:
    return digest(path.read_bytes()) if path.is_file() else "missing"


@dataclass(frozen=True)
class Entry:
    """One rendered job and the inputs, besides its spec file, that it depends on. The job
    is kept as its checked spec (small); catalog objects are not stored per entry."""

    spec: Any
    team: str | None
    user_env: dict[str, str]
    documents: list[dict[str, Any]]
    text: str
    dependencies: dict[str, str]

    def fresh(self) -> bool:
        return all(file_digest(Path(p)) == h for p, h in self.dependencies.items())


def load_pickle(path: Path) -> Any | None:
    """A cached object, or None when it is missing or unreadable (the cache is disposable)."""
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError):
        return None


def store_pickle(path: Path, value: Any) -> None:
    """Write atomically, so that a concurrent reader sees the old object or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(name, path)


class RenderCache:
    """One pickle per entry in `.gkr/cache/<fingerprint>/`, so a render after one change
    reads the unchanged entries and writes only the new one."""

    def __init__(self, root: Path, inputs: list[Path]) -> None:
        self.base = root / CACHE_DIR
        self.fingerprint = digest(*(p.read_bytes() for p in inputs + _generator_files()))
        self.folder = self.base / self.fingerprint[:32]
        self.used: set[str] = set()
        self.new: dict[str, Entry] = {}

    def get(self, key: str) -> Entry | None:
        entry = load_pickle(self.folder / key)
        if entry is None or not entry.fresh():
            return None
        self.used.add(key)
        return entry

    def put(self, key: str, entry: Entry) -> None:
        self.used.add(key)
        self.new[key] = entry

    def save(self) -> None:
        """Write new entries atomically; drop entries and fingerprints no longer used."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for key, entry in self.new.items():
            store_pickle(self.folder / key, entry)
        for stale in self.folder.iterdir():
            if stale.name not in self.used:
                stale.unlink(missing_ok=True)
        for other in self.base.iterdir():
            if other != self.folder:
                shutil.rmtree(other, ignore_errors=True)


def _generator_files() -> list[Path]:
    package = Path(generator.__file__).parent
    return sorted(p for p in package.rglob("*") if p.suffix in {".py", ".j2", ".json"})
