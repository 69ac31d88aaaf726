"""A bundle's folder on any fsspec filesystem: a local path, or a URL such as gs://.

The same filesystems and URLs as the checkpoints (runtime.checkpoint.storage): fsspec's
`url_to_fs` resolves either, so a run that can checkpoint somewhere can leave its bundle there.
"""

from __future__ import annotations

from pathlib import Path

import fsspec
from fsspec.core import url_to_fs

from runtime.errors import Category, RuntimeFailure

MANIFEST = "bundle.json"  # written last: a bundle is complete once it exists


class BundleError(RuntimeFailure):
    """A bundle cannot be found, read or written."""

    category = Category.INVALID_INPUT


class Folder:
    """Files under one root URI; names are relative, `/`-separated."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/") or "/"
        self.fs: fsspec.AbstractFileSystem
        try:
            self.fs, self.root = url_to_fs(self.uri)
        except (ImportError, ValueError) as error:  # a scheme whose package is missing
            raise BundleError(f"cannot open {self.uri}: {error}") from None
        self.root = self.root.rstrip("/")

    def child(self, name: str) -> Folder:
        return Folder(f"{self.uri}/{name}")

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def write(self, name: str, data: bytes) -> None:
        """Write one file, making its folders."""
        path = self.path(name)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)

    def read(self, name: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self.path(name)))
        except (OSError, ValueError) as error:
            raise BundleError(f"cannot read {self.uri}/{name}: {error}") from None

    def exists(self, name: str = "") -> bool:
        return bool(self.fs.exists(self.path(name) if name else self.root))

    def names(self) -> list[str]:
        """Every file below the root, relative to it, sorted."""
        return sorted(self.sizes())

    def sizes(self) -> dict[str, int]:
        """Every file below the root and its size. Listed afresh: other processes (the
        ranks) write here too, and remote filesystems cache listings."""
        self.fs.invalidate_cache(self.root)
        if not self.fs.exists(self.root):
            return {}
        found = self.fs.find(self.root, detail=True)
        prefix = self.root + "/"
        return {str(path).removeprefix(prefix): int(info.get("size") or 0)
                for path, info in found.items() if str(path).startswith(prefix)}

    def folders(self) -> list[str]:
        """The names of the folders right below the root."""
        if not self.fs.exists(self.root):
            return []
        return sorted(str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
                      for entry in self.fs.ls(self.root, detail=True)
                      if entry.get("type") == "directory")

    def download(self, target: Path, skip: str | None = None) -> list[str]:
        """Copy every file to `target` (a local folder), but those under `skip`; the names
        copied."""
        names = [name for name in self.names() if not (skip and name.startswith(skip))]
        for name in names:
            local = target / name
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(self.read(name))
        return names
