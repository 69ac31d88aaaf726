"""One writer at a time for a repository's rendered tree and its caches.

The lock is an exclusive `flock` on `.gkr/lock`. Unlike git's `index.lock` (a file whose
existence is the lock, left behind by a killed process), the kernel drops a `flock` when its
holder dies, SIGKILL included, so a lock left by a dead process is taken over at once. The
file's content names the holder (pid, host, command, since when) for whoever has to wait.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from generator.errors import BadRequest

LOCK_FILE = ".gkr/lock"
# How long a second `gkr render` waits for the first: the lock is held while a tree is
# written, not while it is rendered, so a wait this long means the holder is stuck.
WAIT_S = 30.0
POLL_S = 0.05


class TreeBusy(BadRequest):
    """Another process held the tree's lock for longer than the wait."""


@dataclass(frozen=True)
class Holder:
    """Who holds the lock, as written into the lock file."""

    pid: int
    host: str
    command: str
    since: str

    @classmethod
    def me(cls) -> Holder:
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "python"
        since = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(os.getpid(), socket.gethostname(), command, since)

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host} (`{self.command}`, since {self.since})"


# Roots this process holds, with a depth: a nested `tree_lock` on the same root must not
# wait for itself (flock treats each open file as a separate holder).
_HELD: dict[Path, int] = {}


@contextmanager
def tree_lock(root: Path, wait_s: float = WAIT_S, reading: bool = False) -> Iterator[bool]:
    """Hold the tree's lock; wait up to `wait_s` for another holder, then raise TreeBusy.
    Yields whether the lock is held: a reader (`reading`) of a tree it may not write to (a
    read-only checkout) reads without it, since nobody can be writing there either."""
    key = root.resolve()
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield True
        finally:
            _HELD[key] -= 1
        return
    fd = _open(root / LOCK_FILE, reading)
    if fd is None:
        yield False
        return
    try:
        _acquire(fd, root, wait_s)
        _HELD[key] = 1
        try:
            _write_holder(fd)
            yield True
        finally:
            del _HELD[key]
            os.ftruncate(fd, 0)  # an unlocked file names nobody
    finally:
        os.close(fd)  # closing releases the flock


def _open(path: Path, reading: bool) -> int | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        if reading and error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return None
        raise BadRequest(f"cannot open the tree's lock {path}: {error.strerror}") from None


def _acquire(fd: int, root: Path, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TreeBusy(_busy_message(root, wait_s)) from None
            time.sleep(POLL_S)
        except OSError as error:  # a filesystem without locks (some network mounts)
            raise BadRequest(f"cannot lock {root / LOCK_FILE}: {error.strerror}") from None


def _write_holder(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(asdict(Holder.me())).encode(), 0)


def holder(root: Path) -> Holder | None:
    """Who the lock file names (None when nobody, or when it is being rewritten)."""
    try:
        return Holder(**json.loads((root / LOCK_FILE).read_bytes()))
    except (OSError, ValueError, TypeError):
        return None


def _busy_message(root: Path, wait_s: float) -> str:
    found = holder(root)
    who = str(found) if found else "another process"
    return (f"the rendered tree is locked by {who}; waited {wait_s:g} s. Let it finish and "
            f"run the command again (the lock, {LOCK_FILE}, is released when its holder exits)")
