"""The run's code in the agent's workspace, and the agent's fix taken from it.

The code is a shared clone (`git clone --shared`) of the repository holding the run's commit,
checked out at that commit with the run's recorded uncommitted changes applied and committed
there as its base. A clone rather than a worktree: a worktree shares the repository's refs
and config, so an agent could make branches in the user's repository; a clone reads the same
objects (nothing is copied) and has refs of its own, and its remote is removed. The agent's
fix is the diff of the clone against that base, or the patch file it wrote.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from generator.errors import BadRequest, ToolFailed
from runtime.crash.code import CodeIdentity

BASE_AUTHOR = ("-c", "user.name=gkr diagnose", "-c", "user.email=gkr@localhost")
PATCH_BYTES = 4 << 20  # a fix larger than this is not a fix to review


def git(folder: Path, *args: str, env: dict[str, str] | None = None,
        stdin: bytes | None = None) -> str:
    """git in `folder`; ToolFailed with git's message when it fails."""
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              input=stdin, env=env, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ToolFailed(f"git {args[0]}: {error}") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise ToolFailed(f"git {args[0]} failed: {message}")
    return done.stdout.decode("utf-8", "replace").strip()


def has_commit(folder: Path, commit: str) -> bool:
    try:
        git(folder, "cat-file", "-e", f"{commit}^{{commit}}")
    except ToolFailed:
        return False
    return True


def repository_with(code: CodeIdentity, candidates: Sequence[Path]) -> Path:
    """The first repository that holds the run's commit: its own checkout, if it is on this
    machine, else the repository of the current directory."""
    if not code.commit:
        raise BadRequest("the bundle records no git commit of the run's code "
                         f"({'; '.join(code.problems) or 'the run was not in a git checkout'})")
    for folder in [Path(code.root)] * bool(code.root) + list(candidates):
        if folder.is_dir() and has_commit(folder, code.commit):
            return Path(git(folder, "rev-parse", "--show-toplevel"))
    raise BadRequest(f"commit {code.commit[:12]} of the run's code is in no repository here "
                     "(fetch it, or run gkr diagnose inside the run's repository)")


def clone_code(repo: Path, code: CodeIdentity, changes: bytes, target: Path) -> str:
    """The run's code at `target`; the sha of its base commit (the run's commit plus its
    recorded changes)."""
    git(repo, "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(target))
    git(target, "remote", "remove", "origin")
    git(target, "checkout", "--quiet", "--detach", code.commit)
    if changes:
        git(target, "apply", "--index", "--binary", "--whitespace=nowarn", "-", stdin=changes)
    git(target, *BASE_AUTHOR, "commit", "--quiet", "--allow-empty", "--no-verify",
        "--message", "the run's code: its commit and recorded changes (gkr diagnose)")
    return git(target, "rev-parse", "HEAD")


def changes_since(code: Path, base: str) -> bytes:
    """What the agent changed in the clone since `base` (committed or not), as a binary diff;
    taken through a temporary index, so the agent's own index stays as it left it."""
    with tempfile.TemporaryDirectory(prefix="gkr-index-") as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(code, "read-tree", "HEAD", env=env)
        git(code, "add", "--all", env=env)
        done = subprocess.run(["git", "-C", str(code), "diff", "--cached", "--binary", base],
                              capture_output=True, env=env, timeout=120, check=False)
    if done.returncode != 0:
        raise ToolFailed(f"git diff failed: {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout


def check_patch(code: Path, base: str, patch: bytes) -> None:
    """BadRequest unless `patch` applies to `base` (checked on a temporary index)."""
    if len(patch) > PATCH_BYTES:
        raise BadRequest(f"the agent's patch is {len(patch)} bytes; a fix to review is at "
                         f"most {PATCH_BYTES}")
    with tempfile.TemporaryDirectory(prefix="gkr-index-") as scratch:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(code, "read-tree", base, env=env)
        try:
            git(code, "apply", "--cached", "--check", "--binary", "-", env=env, stdin=patch)
        except ToolFailed as error:
            raise BadRequest(f"the agent's patch does not apply to the run's code: {error}"
                             ) from None
