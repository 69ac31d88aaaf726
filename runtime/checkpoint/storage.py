"""Where checkpoints live: one directory per step, visible only once its commit marker exists.

Works on any fsspec filesystem (a local directory by default, `gs://` and the like through
their fsspec packages). A half-written checkpoint has no marker, so `latest()` skips it.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from runtime.errors import RuntimeFailure

MARKER = "COMMITTED"
_STEP_DIR = re.compile(r"step-(\d{10})$")


class CheckpointError(RuntimeFailure):
    """A checkpoint could not be written, found or read."""


class CheckpointStore:
    """Lists, commits and prunes the step directories under one root URI."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")
        self.fs: fsspec.AbstractFileSystem
        try:
            self.fs, self.root = url_to_fs(self.uri)
        except (ImportError, ValueError) as error:  # e.g. a scheme whose package is missing
            raise CheckpointError(f"cannot open checkpoint storage {self.uri}: {error}") from None
        # URLs (file:// included) go through DCP's fsspec writer; plain paths through its
        # local writer, which also fsyncs.
        self.remote = "://" in self.uri

    def step_uri(self, step: int) -> str:
        return f"{self.uri}/step-{step:010d}"

    def _path(self, step: int) -> str:
        return f"{self.root.rstrip('/')}/step-{step:010d}"

    def steps(self) -> dict[int, bool]:
        """Every step directory found, mapped to whether it is committed."""
        if not self.fs.exists(self.root):
            return {}
        found = {}
        for entry in self.fs.ls(self.root, detail=False):
            match = _STEP_DIR.search(entry.rstrip("/"))
            if match:
                step = int(match.group(1))
                found[step] = self.fs.exists(f"{self._path(step)}/{MARKER}")
        return found

    def latest(self) -> int | None:
        committed = [s for s, ok in self.steps().items() if ok]
        return max(committed, default=None)

    def latest_of(self, run: str) -> int | None:
        """The newest step committed by the run `run` (its marker says so), or None."""
        for step in sorted((s for s, ok in self.steps().items() if ok), reverse=True):
            if self.marker(step).get("run") == run:
                return step
        return None

    def marker(self, step: int) -> dict[str, Any]:
        """What the commit marker of `step` records (empty when unreadable)."""
        try:
            body = json.loads(self.fs.cat_file(f"{self._path(step)}/{MARKER}"))
        except (OSError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def clear(self, step: int) -> None:
        """Remove the leftovers of an earlier, uncommitted attempt at `step`."""
        if self.fs.exists(self._path(step)):
            self.fs.rm(self._path(step), recursive=True)

    def commit(self, step: int, info: dict[str, Any]) -> None:
        """Write the marker last: only now does the checkpoint become visible."""
        body = json.dumps({"step": step, "committed_at": time.time(), **info}, sort_keys=True)
        self.fs.makedirs(self._path(step), exist_ok=True)
        self.fs.pipe_file(f"{self._path(step)}/{MARKER}", body.encode())

    def prune(self, keep_last: int) -> list[int]:
        """Drop committed steps beyond the newest `keep_last`, and uncommitted older ones."""
        steps = self.steps()
        committed = sorted(s for s, ok in steps.items() if ok)
        keep = set(committed[-keep_last:])
        newest = max(committed, default=-1)
        doomed = [s for s, ok in steps.items() if s not in keep and (ok or s < newest)]
        for step in sorted(doomed):
            self.fs.rm(self._path(step), recursive=True)
        return sorted(doomed)

    def resolve(self, resume_from: str | None) -> str | None:
        """The URI to resume from: `latest` (None when there is none) or an explicit one."""
        if resume_from is None:
            return None
        if resume_from == "latest":
            step = self.latest()
            return None if step is None else self.step_uri(step)
        fs, path = url_to_fs(resume_from)
        if not fs.exists(f"{path.rstrip('/')}/{MARKER}"):
            raise CheckpointError(
                f"checkpoint.resume_from: {resume_from} has no {MARKER} marker "
                "(it is missing or was never completely written)"
            )
        return resume_from.rstrip("/")
