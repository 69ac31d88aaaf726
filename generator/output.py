"""Writing the rendered tree to disk, and comparing it with what is there."""

from __future__ import annotations

import difflib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from generator.platform import PLATFORM_ROOTS
from generator.tree import Tree

# Folders that belong to the generator entirely: a file there that no spec renders is removed.
GENERATED_ROOTS: list[str] = ["kustomize", *PLATFORM_ROOTS]


def existing_files(root: Path) -> dict[str, str]:
    """The generated files currently on disk."""
    found = {}
    for top in GENERATED_ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file():
                found[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return found


@dataclass(frozen=True)
class Changes:
    written: list[str]
    removed: list[str]

    def __bool__(self) -> bool:
        return bool(self.written or self.removed)


def plan_changes(root: Path, tree: Tree) -> Changes:
    current = existing_files(root)
    written = sorted(p for p, text in tree.files.items() if current.get(p) != text)
    removed = sorted(set(current) - set(tree.files))
    return Changes(written, removed)


def write_tree(root: Path, tree: Tree) -> Changes:
    """Write changed files (each via a temporary file and rename), then remove stale ones."""
    changes = plan_changes(root, tree)
    staged = [(_stage(root / path, tree.files[path]), root / path) for path in changes.written]
    for temporary, target in staged:
        os.replace(temporary, target)
    for path in changes.removed:
        (root / path).unlink()
        _prune_empty(root / path, root)
    return changes


def _stage(target: Path, text: str) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return Path(name)


def _prune_empty(path: Path, root: Path) -> None:
    folder = path.parent
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def diff_tree(root: Path, tree: Tree) -> str:
    """A unified diff from the tree on disk to the freshly rendered one."""
    current = existing_files(root)
    chunks: list[str] = []
    for path in sorted(set(current) | set(tree.files)):
        before, after = current.get(path), tree.files.get(path)
        if before == after:
            continue
        chunks.extend(difflib.unified_diff(
            (before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if before is not None else "/dev/null",
            tofile=f"b/{path}" if after is not None else "/dev/null",
        ))
    return "".join(chunks)
