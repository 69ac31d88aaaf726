"""`gkr submit --gitops`: write the spec into jobs/<team>/, render, commit on a new branch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git
import yaml

from generator.errors import BadRequest
from generator.output import write_tree
from generator.render import render_tree
from generator.resolve import ResolvedJob


def spec_document(job: ResolvedJob, env_file: str | None) -> dict[str, Any]:
    """The spec as a researcher would write it: only the fields that differ from defaults."""
    data = job.spec.model_dump(mode="json", exclude_defaults=True)
    data.pop("name", None)  # the file name is the job name
    data.pop("namespace", None)  # the team folder decides the namespace
    data.pop("env_file", None)
    if env_file:
        data["env_file"] = env_file
    return data


def _copy_env(root: Path, job: ResolvedJob, env_source: Path | None) -> str | None:
    """The env file travels into the repository beside the spec (env files are reviewed too)."""
    if env_source is None:
        return None
    target = root / "jobs" / job.team / "env" / f"{job.name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(env_source.read_text())
    return f"env/{job.name}.yaml"


def submit_gitops(root: Path, job: ResolvedJob, env_source: Path | None = None,
                  branch: str | None = None) -> tuple[str, str]:
    """Commit spec + rendered tree on a new branch; returns (branch, commit sha)."""
    repo = git.Repo(root)
    branch = branch or f"gkr/submit-{job.team}-{job.name}"
    if branch in [head.name for head in repo.heads]:
        raise BadRequest(f"branch {branch!r} exists already; pass another --branch")
    spec_path = root / "jobs" / job.team / f"{job.name}.yaml"
    if spec_path.exists():
        raise BadRequest(f"{spec_path.relative_to(root)} exists already; edit it in a pull request")
    previous = repo.active_branch
    repo.create_head(branch).checkout()
    try:
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        header = f"# Submitted with `gkr submit --gitops` by {job.spec.owner}.\n"
        env_file = _copy_env(root, job, env_source)
        document = spec_document(job, env_file)
        spec_path.write_text(header + yaml.safe_dump(document, sort_keys=False))
        changes = write_tree(root, render_tree(root))
        paths = [spec_path.relative_to(root).as_posix(), *changes.written, *changes.removed]
        if env_file:
            paths.append(f"jobs/{job.team}/{env_file}")
        repo.index.add([p for p in paths if (root / p).exists()])
        commit = repo.index.commit(f"Submit {job.kind} {job.team}/{job.name} ({job.spec.owner})")
    except Exception:
        previous.checkout(force=True)
        raise
    return branch, commit.hexsha
