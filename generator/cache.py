"""A content-addressed cache of rendered jobs, so that re-rendering after one spec changes
costs one spec's work (`.gkr/cache/`, ignored by git).

An entry is keyed by the spec file's bytes and remembers the hashes of the other inputs it
read (its env file); the whole cache is dropped when any catalog file, template or
generator module changes. Only valid jobs are cached, so errors are always recomputed.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import generator

CACHE_FILE = ".gkr/cache/render.pickle"


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
    """One rendered job and the inputs, besides its spec file, that it depends on."""

    job: Any
    documents: list[dict[str, Any]]
    text: str
    dependencies: dict[str, str]

    def fresh(self) -> bool:
        return all(file_digest(Path(p)) == h for p, h in self.dependencies.items())


class RenderCache:
    def __init__(self, root: Path, inputs: list[Path]) -> None:
        self.path = root / CACHE_FILE
        self.fingerprint = digest(*(p.read_bytes() for p in inputs + _generator_files()))
        self.entries: dict[str, Entry] = self._load()
        self.used: dict[str, Entry] = {}

    def _load(self) -> dict[str, Entry]:
        try:
            with self.path.open("rb") as handle:
                fingerprint, entries = pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError):
            return {}
        return entries if fingerprint == self.fingerprint else {}

    def get(self, key: str) -> Entry | None:
        entry = self.entries.get(key)
        if entry is not None and entry.fresh():
            self.used[key] = entry
            return entry
        return None

    def put(self, key: str, entry: Entry) -> None:
        self.used[key] = entry

    def save(self) -> None:
        """Keep only the entries of this render; replace the file atomically."""
        if self.used.keys() == self.entries.keys():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump((self.fingerprint, self.used), handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(name, self.path)


def _generator_files() -> list[Path]:
    package = Path(generator.__file__).parent
    return sorted(p for p in package.rglob("*") if p.suffix in {".py", ".j2"})
