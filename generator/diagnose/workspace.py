"""The run's code in the agent's workspace, and the agent's fix taken from it, with git that
the agent cannot steer.

The code is a shared clone (`git clone --shared`) of the repository holding the run's commit,
checked out at that commit with the run's recorded uncommitted changes applied and committed
there as its base. A clone rather than a worktree: a worktree shares the repository's refs
and config, so an agent could make branches in the user's repository; a clone reads the same
objects (nothing is copied) and has refs of its own, and its remote is removed.

Once the agent has run, its clone is data, never configuration: it may have written
`.git/config` (`core.fsmonitor`, `core.hooksPath`, `diff.external`, a filter driver),
`.git/hooks`, `.git/info/attributes`. So the fix is taken through a fresh repository that gkr
makes after the agent exited, outside the workspace: it borrows the user's repository's
objects (gitrepository-layout(5), `objects/info/alternates`), rebuilds the base tree from the
run's commit and recorded changes, and reads the agent's checkout only as a work tree
(`--git-dir`/`--work-tree`, git(1)); git never treats the checkout's own `.git` as anything
but a path it does not add. Every git runs with `safe_git`: see there.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from generator.errors import BadRequest, ToolFailed
from runtime.crash.code import CodeIdentity

BASE_AUTHOR = ("-c", "user.name=gkr diagnose", "-c", "user.email=gkr@localhost")
PATCH_BYTES = 4 << 20  # a fix larger than this is not a fix to review
BASE_MESSAGE = "the run's code: its commit and recorded changes (gkr diagnose)"
# Given with -c, which wins over every configuration file (git-config(1), "CONFIGURATION
# FILE": the command line is read last), so a config the agent wrote cannot undo them.
SAFE_CONFIG = (
    "-c", "core.hooksPath=/dev/null",  # githooks(5): hooks are looked up there: none run
    "-c", "core.fsmonitor=false",  # git-config(1) core.fsmonitor: else a command it runs
    "-c", "diff.external=",  # git-config(1) diff.external: no external diff program
    "-c", "core.pager=cat",  # git-config(1) core.pager: no program of the config's
    "-c", "core.attributesFile=/dev/null",  # gitattributes(5): no user attributes file
    "-c", "core.editor=false", "-c", "sequence.editor=false",
    "-c", "credential.helper=",  # gitcredentials(7): an empty helper resets the list
    "-c", "protocol.allow=never",  # git-config(1) protocol.allow: no network transport;
    "-c", "protocol.file.allow=always",  # only the local clone of the user's repository
)


def safe_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """git's whole environment: PATH and the locale, an empty HOME, no system or global
    config (git(1): GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL), no prompt; nothing of the
    user's credentials (tokens, SSH agent, cloud and cluster config) reaches it."""
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "HOME": str(home), "XDG_CONFIG_HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
           "GIT_ATTR_NOSYSTEM": "1", "GIT_NO_REPLACE_OBJECTS": "1"}
    return env | (extra or {})


def safe_git(cwd: Path, *args: str, extra_env: dict[str, str] | None = None,
             stdin: bytes | None = None, git_dir: Path | None = None,
             work_tree: Path | None = None) -> bytes:
    """git's stdout, run in `cwd` with SAFE_CONFIG and `safe_env` (--no-ext-diff and
    --no-textconv are the diff's own, git-diff(1)); ToolFailed with git's message."""
    where = [f"--git-dir={git_dir}"] * bool(git_dir) + [f"--work-tree={work_tree}"] * bool(
        work_tree)
    with tempfile.TemporaryDirectory(prefix="gkr-git-home-") as home:
        try:
            done = subprocess.run(["git", *SAFE_CONFIG, *where, *args], cwd=cwd,
                                  capture_output=True, input=stdin, timeout=120, check=False,
                                  env=safe_env(Path(home), extra_env))
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ToolFailed(f"git {args[0]}: {error}") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise ToolFailed(f"git {args[0]} failed: {message}")
    return done.stdout


def git(folder: Path, *args: str, stdin: bytes | None = None) -> str:
    """`safe_git` in `folder`, its output as text."""
    return safe_git(folder, *args, stdin=stdin).decode("utf-8", "replace").strip()


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
    """The run's code at `target` (before the agent runs); the sha of its base commit (the
    run's commit plus its recorded changes)."""
    git(repo, "clone", "--quiet", "--shared", "--no-checkout", str(repo), str(target))
    git(target, "remote", "remove", "origin")
    git(target, "checkout", "--quiet", "--detach", code.commit)
    if changes:
        git(target, "apply", "--index", "--binary", "--whitespace=nowarn", "-", stdin=changes)
    git(target, *BASE_AUTHOR, "commit", "--quiet", "--allow-empty", "--no-verify",
        "--message", BASE_MESSAGE)
    return git(target, "rev-parse", "HEAD")


@contextmanager
def fresh_base(repo: Path, commit: str, changes: bytes) -> Iterator[tuple[Path, str]]:
    """A new bare repository outside any workspace, borrowing `repo`'s objects, and the
    tree of `commit` with `changes` applied (the base the agent started from): the git dir
    and the tree's sha. Removed afterwards."""
    objects = git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
    with tempfile.TemporaryDirectory(prefix="gkr-diagnose-git-") as scratch:
        gitdir = Path(scratch) / "git"
        git(Path(scratch), "init", "--quiet", "--bare", str(gitdir))
        (gitdir / "objects" / "info" / "alternates").write_text(f"{objects}/objects\n")
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        safe_git(gitdir, "read-tree", commit, git_dir=gitdir, extra_env=index)
        if changes:
            safe_git(gitdir, "apply", "--cached", "--binary", "--whitespace=nowarn", "-",
                     git_dir=gitdir, extra_env=index, stdin=changes)
        tree = safe_git(gitdir, "write-tree", git_dir=gitdir, extra_env=index)
        yield gitdir, tree.decode().strip()


def changes_since(repo: Path, commit: str, changes: bytes, code: Path) -> bytes:
    """What the agent changed in its checkout `code` since the base (committed or not), as
    a binary diff; read through a fresh repository (`fresh_base`): nothing in the checkout's
    `.git` is read or run."""
    with fresh_base(repo, commit, changes) as (gitdir, tree), \
            tempfile.TemporaryDirectory(prefix="gkr-index-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}

        def run(*args: str) -> bytes:
            return safe_git(code, *args, git_dir=gitdir, work_tree=code, extra_env=index)

        run("read-tree", tree)
        run("add", "--all")
        return run("diff", "--cached", "--binary", "--no-ext-diff", "--no-textconv", tree)


def check_patch(repo: Path, commit: str, changes: bytes, patch: bytes) -> None:
    """BadRequest unless `patch` applies to the base (checked in a fresh repository)."""
    if len(patch) > PATCH_BYTES:
        raise BadRequest(f"the agent's patch is {len(patch)} bytes; a fix to review is at "
                         f"most {PATCH_BYTES}")
    with fresh_base(repo, commit, changes) as (gitdir, tree), \
            tempfile.TemporaryDirectory(prefix="gkr-index-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        safe_git(gitdir, "read-tree", tree, git_dir=gitdir, extra_env=index)
        try:
            safe_git(gitdir, "apply", "--cached", "--check", "--binary", "-", git_dir=gitdir,
                     extra_env=index, stdin=patch)
        except ToolFailed as error:
            raise BadRequest(f"the agent's patch does not apply to the run's code: {error}"
                             ) from None
