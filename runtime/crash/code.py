"""The code a run ran: the git commit and the uncommitted changes of its checkout, or the
working-directory archive Ray unpacked for it (`gkr submit --working-dir`).

Runs git as a subprocess (argv lists, bounded time); the changes are taken through a temporary
index, so the user's index is never written: tracked modifications plus the untracked files
git would add (.gitignore respected) up to a size bound, as one binary diff against HEAD.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 20.0
UNTRACKED_FILE_BYTES = 1 << 20  # larger untracked files are data, not code: listed, not diffed
UNTRACKED_FILES = 500


@dataclass(frozen=True)
class CodeIdentity:
    """Where to find the exact code again: a commit plus `changes`, or an archive."""

    root: str = ""  # the checkout's top folder ("" without git)
    commit: str = ""
    branch: str = ""
    changes_sha256: str = ""  # of the diff against `commit` (empty diff: clean)
    changes_bytes: int = 0
    left_out: tuple[str, ...] = ()  # untracked files too large to be code
    working_dir: str = ""  # Ray's runtime_env working_dir (a code-store archive URI)
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def dirty(self) -> bool:
        return self.changes_bytes > 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"dirty": self.dirty}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CodeIdentity:
        known = {key: data[key] for key in cls.__dataclass_fields__ if key in data}
        for key in ("left_out", "problems"):
            known[key] = tuple(known.get(key) or ())
        return cls(**known)


def git(folder: Path, *args: str, env: dict[str, str] | None = None,
        stdin: bytes | None = None) -> str:
    """git's stdout; raises OSError or subprocess errors (callers record them)."""
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, input=stdin,
                          timeout=GIT_TIMEOUT_S, check=True, env=env)
    return done.stdout.decode("utf-8", "replace").strip()


def identify(folder: Path, working_dir: str = "") -> tuple[CodeIdentity, bytes]:
    """The identity of the checkout holding `folder`, and the diff of its changes."""
    try:
        top = Path(git(folder, "rev-parse", "--show-toplevel"))
        commit = git(top, "rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError) as error:
        return CodeIdentity(working_dir=working_dir, problems=(f"no git commit: {_why(error)}",)
                            ), b""
    branch = _quiet(lambda: git(top, "rev-parse", "--abbrev-ref", "HEAD"))
    try:
        diff, left_out = changes(top)
    except (OSError, subprocess.SubprocessError) as error:
        return CodeIdentity(str(top), commit, branch, working_dir=working_dir,
                            problems=(f"changes not recorded: {_why(error)}",)), b""
    digest = hashlib.sha256(diff).hexdigest() if diff else ""
    return CodeIdentity(str(top), commit, branch, digest, len(diff), tuple(left_out),
                        working_dir), diff


def changes(top: Path) -> tuple[bytes, list[str]]:
    """The checkout's changes against HEAD as a binary diff (`git apply` reads it): files
    modified or deleted, files staged in the user's index, and untracked files git would add;
    and the untracked files left out for their size or number."""
    untracked = _names(git(top, "ls-files", "-z", "--others", "--exclude-standard"))
    indexed = _names(git(top, "ls-files", "-z", "--cached"))
    small = [n for n in untracked if _size(top / n) <= UNTRACKED_FILE_BYTES][:UNTRACKED_FILES]
    present = [n for n in [*indexed, *small] if os.path.lexists(top / n)]
    with tempfile.TemporaryDirectory(prefix="gkr-index-") as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(top, "read-tree", "HEAD", env=env)
        git(top, "add", "--update", env=env)
        git(top, "add", "--pathspec-from-file=-", "--pathspec-file-nul", env=env,
            stdin="\0".join(present).encode())
        done = subprocess.run(["git", "-C", str(top), "diff", "--cached", "--binary", "HEAD"],
                              capture_output=True, timeout=GIT_TIMEOUT_S, check=True, env=env)
    return done.stdout, sorted(set(untracked) - set(small))


def _names(listing: str) -> list[str]:
    return [name for name in listing.split("\0") if name]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else UNTRACKED_FILE_BYTES + 1
    except OSError:
        return UNTRACKED_FILE_BYTES + 1


def _quiet(read: Any) -> str:
    try:
        return str(read())
    except (OSError, subprocess.SubprocessError):
        return ""


def _why(error: BaseException) -> str:
    stderr = getattr(error, "stderr", None)
    if isinstance(stderr, bytes) and stderr.strip():
        return stderr.decode("utf-8", "replace").strip().splitlines()[-1]
    return str(error) or type(error).__name__
