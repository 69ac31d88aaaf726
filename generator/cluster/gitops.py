"""`gkr submit --gitops`: a commit adding one job (its spec, its env file and the manifests it
renders to) on a new branch, built in a temporary git worktree.

The user's working tree, index and current branch are never touched: the branch starts at a
commit (HEAD by default, so a detached HEAD works as well), the spec is rendered in a
throw-away checkout of that commit, and only the new branch ref is written back.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from generator.catalog import Catalog
from generator.errors import BadRequest, StaleTree, ToolFailed
from generator.output import GENERATED_ROOTS, write_tree
from generator.placement import JOBS_DIR
from generator.render import render_tree
from generator.resolve import ResolvedJob
from generator.vcs import load_git
from generator.yamlio import load_document, read_input

if TYPE_CHECKING:
    import git

# Stale outputs named in an error before it says "and N more".
SHOWN = 5
# What needs git, for the error when git is missing (see generator.vcs).
PURPOSE = "gkr submit --gitops"


@dataclass(frozen=True)
class Submitted:
    """The commit `submit_gitops` made."""

    branch: str
    """The new branch, pointing at `commit`."""
    commit: str
    """Its full sha."""
    base: str
    """The sha it is based on."""
    paths: list[str]
    """What it adds or changes, relative to the GKR repository root."""


@dataclass(frozen=True)
class JobFiles:
    """The files a job adds under jobs/, relative to the GKR repository root."""

    spec: str
    """The spec's path."""
    texts: dict[str, bytes]
    """Every file's content by path: the spec's, and its env file's if it has one."""


def default_branch(job: ResolvedJob) -> str:
    return f"gkr/submit-{job.team}-{job.name}"


def spec_document(job: ResolvedJob, env_file: str | None,
                  file_env: dict[str, str] | None = None) -> dict[str, Any]:
    """The spec as a researcher would write it: only the fields that differ from defaults.
    Variables that the env file already sets to the same value are left to it."""
    data = job.spec.model_dump(mode="json", exclude_defaults=True)
    data.pop("name", None)  # the file name is the job name
    data.pop("namespace", None)  # the team folder decides the namespace
    data.pop("env_file", None)
    env = {k: v for k, v in data.pop("env", {}).items() if (file_env or {}).get(k) != v}
    if env_file:
        data["env_file"] = env_file
    if env:
        data["env"] = env
    return data


def referenced_env(job: ResolvedJob, spec_file: Path | None) -> Path | None:
    """The env file a job read from its spec file (relative to that file, as in `render`)."""
    value = job.spec.env_file
    if not value:
        return None
    if Path(value).is_absolute():
        return Path(value)
    return spec_file.resolve().parent / value if spec_file else None


def job_files(job: ResolvedJob, env_source: Path | None, root: Path) -> JobFiles:
    """The spec and the env file (copied beside it: env files are reviewed too)."""
    folder = f"{JOBS_DIR}/{job.team}"
    spec = f"{folder}/{job.name}.yaml"
    if env_source is None:
        return JobFiles(spec, {spec: _dump(_header(job), spec_document(job, None))})
    env = f"{folder}/env/{job.name}.yaml"
    # The user named it (--env, or a spec file outside the repository): it may live anywhere.
    text = read_input(env_source, root, str(env_source), anywhere=True)
    data, _ = load_document(str(env_source), text)
    document = spec_document(job, f"env/{job.name}.yaml", data if isinstance(data, dict) else {})
    return JobFiles(spec, {spec: _dump(_header(job), document), env: text.encode()})


def _header(job: ResolvedJob) -> str:
    return f"# Submitted with `gkr submit --gitops` by {job.spec.owner}.\n"


def _dump(header: str, document: dict[str, Any]) -> bytes:
    return (header + yaml.safe_dump(document, sort_keys=False)).encode("utf-8")


def submit_gitops(root: Path, job: ResolvedJob, env_source: Path | None = None,
                  branch: str | None = None, base: str | None = None) -> Submitted:
    """Commit the job on a new branch starting at `base` (default HEAD); see the module doc."""
    repo = _open(root)
    name = _free_branch(repo, branch or default_branch(job))
    start = _base_commit(repo, base)
    files = job_files(job, env_source, root)
    inside = _inside(repo, root)
    message = f"Submit {job.kind} {job.team}/{job.name} ({job.spec.owner})"
    with _worktree(repo, start) as top:
        sha, paths = _build_commit(top / inside, files, message, start)
    _git(repo.git, "branch", "--no-track", name, sha)
    return Submitted(name, sha, start, paths)


@dataclass(frozen=True)
class Patch:
    """One commit of `commit_patches`: a diff as `git apply` reads it, and its message."""

    diff: bytes
    message: str


def commit_patches(root: Path, base: str, branch: str, patches: list[Patch]) -> Submitted:
    """Commit each patch in turn on a new branch starting at `base`, in a temporary worktree
    as `submit_gitops` does: the user's working tree, index and current branch are never
    touched, and only the new branch ref is written back (`gkr diagnose approve`)."""
    repo = _open(root)
    name = _free_branch(repo, branch)
    start = _base_commit(repo, base)
    with _worktree(repo, start) as top:
        cmd = load_git(PURPOSE).Git(top)
        for patch in patches:
            _apply(cmd, top.parent, patch)
        sha = _git(cmd, "rev-parse", "HEAD")
        paths = _git(cmd, "diff", "--name-only", start, sha).splitlines()
    _git(repo.git, "branch", "--no-track", name, sha)
    return Submitted(name, sha, start, paths)


def _apply(cmd: git.Git, scratch: Path, patch: Patch) -> None:
    diff = scratch / "change.patch"
    diff.write_bytes(patch.diff)
    _git(cmd, "apply", "--index", "--binary", "--whitespace=nowarn", str(diff))
    _git(cmd, "commit", "--quiet", "--allow-empty", "--message", patch.message)


@contextmanager
def checkout(root: Path, commit: str) -> Iterator[Path]:
    """A detached checkout of `commit` in a temporary folder, removed afterwards."""
    with _worktree(_open(root), commit) as tree:
        yield tree


def _open(root: Path) -> git.Repo:
    git = load_git(PURPOSE)
    try:
        return git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BadRequest(f"{root} is not in a git repository; --gitops commits on a branch "
                         "of the repository") from None


def _inside(repo: git.Repo, root: Path) -> Path:
    """Where the GKR repository sits in the git repository (usually its top)."""
    top = Path(repo.working_tree_dir or root).resolve()
    return root.resolve().relative_to(top)


def _free_branch(repo: git.Repo, name: str) -> str:
    if _run(repo.git, "check-ref-format", f"refs/heads/{name}")[0] != 0:
        raise BadRequest(f"--branch {name!r} is not a valid git branch name")
    if name in {head.name for head in repo.heads}:
        raise BadRequest(f"branch {name!r} exists already; name another with --branch")
    return name


def _base_commit(repo: git.Repo, base: str | None) -> str:
    ref = base or "HEAD"
    status, sha, _ = _run(repo.git, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if status == 0:
        return sha
    if base is None:
        raise BadRequest("HEAD has no commit yet: commit the repository first, or name a "
                         "commit with --base")
    raise BadRequest(f"--base {base!r} is not a commit of this repository")


@contextmanager
def _worktree(repo: git.Repo, commit: str) -> Iterator[Path]:
    """A detached checkout of `commit` in a temporary folder, removed afterwards (its own
    HEAD and index: nothing of the user's checkout is shared but the object store)."""
    folder = Path(tempfile.mkdtemp(prefix="gkr-submit-"))
    tree = folder / "tree"
    try:
        _git(repo.git, "worktree", "add", "--detach", "--quiet", str(tree), commit)
        yield tree
    finally:
        # A failed removal must not hide the error that got us here; `git worktree prune`
        # (run by `git gc`) forgets a worktree whose folder is gone.
        _run(repo.git, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(folder, ignore_errors=True)


def _build_commit(root: Path, files: JobFiles, message: str, base: str) -> tuple[str, list[str]]:
    """In the worktree: check the base renders to itself, add the job, render, commit."""
    if not (root / "clusters").is_dir():
        raise BadRequest(f"commit {base[:10]} holds no GKR repository (no clusters/); commit "
                         "it first or name another commit with --base")
    cmd = load_git(PURPOSE).Git(root)
    _refuse_taken(root, files, base)
    catalog = _render(root, None)
    stale = _changed_outputs(cmd)
    if stale:
        raise StaleTree(_stale_message(stale, base))
    for path, data in files.texts.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    _render(root, catalog)
    paths = [*files.texts, *_changed_outputs(cmd)]
    _git(cmd, "add", "--all", "--", *paths)
    _git(cmd, "commit", "--quiet", "--message", message)
    return _git(cmd, "rev-parse", "HEAD"), paths


def _refuse_taken(root: Path, files: JobFiles, base: str) -> None:
    """A job never replaces another's files, env files included (they may be shared)."""
    for path in files.texts:
        if (root / path).exists() or (root / path).is_symlink():
            owner = "a job of that name" if path == files.spec else "another job's env file"
            raise BadRequest(f"{path} exists already in {base[:10]} ({owner}); choose another "
                             "job name, or change that file in a pull request")


def _render(root: Path, catalog: Catalog | None) -> Catalog:
    """Render the worktree in place. The cache the first render leaves in the worktree makes
    the second re-render only the new spec; it is never committed (not a generated root)."""
    catalog = catalog or Catalog(root)
    write_tree(root, render_tree(root, catalog))
    return catalog


def _changed_outputs(cmd: git.Git) -> list[str]:
    """Generated files that differ from the worktree's commit (modified, removed or new)."""
    listed = _git(cmd, "ls-files", "-z", "--modified", "--others", "--exclude-standard",
                  "--", *GENERATED_ROOTS)
    return sorted({path for path in listed.split("\0") if path})


def _stale_message(paths: list[str], base: str) -> str:
    shown = ", ".join(paths[:SHOWN]) + (f" and {len(paths) - SHOWN} more"
                                        if len(paths) > SHOWN else "")
    return (f"the rendered tree of {base[:10]} is stale (rendering changes {shown}); run "
            "`gkr render`, commit the result, and submit again")


def _git(cmd: git.Git, *args: str) -> str:
    """Run git; a failure becomes ToolFailed with git's own message."""
    status, out, err = _run(cmd, *args)
    if status != 0:
        raise ToolFailed(f"git {args[0]} failed: {err or out or f'exit status {status}'}")
    return out


def _run(cmd: git.Git, *args: str) -> tuple[int, str, str]:
    """Run git in `cmd`'s folder: (exit status, stdout, stderr), raising nothing but for a
    missing git."""
    try:
        status, out, err = cmd.execute(["git", *args], with_extended_output=True,
                                       with_exceptions=False)
    except load_git(PURPOSE).GitCommandNotFound:
        raise ToolFailed(f"{PURPOSE} needs git, and git was not found on PATH") from None
    return int(status or 0), str(out), str(err)
