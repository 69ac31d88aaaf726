"""`gkr submit --gitops` on scratch repositories: the commit is built in a temporary worktree,
so the user's working tree, index and branch are never touched, and the commit holds exactly
the new spec, its env file and the manifests it renders to."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import git
import pytest
import yaml

from generator.catalog import Catalog
from generator.render import render_tree
from generator.validate import validate_tree
from tests.cluster.conftest import commit_all
from tests.cluster.test_cluster_cli import SUBMIT, gkr

SPEC = "jobs/llm/train-a.yaml"
ENV = "jobs/llm/env/train-a.yaml"
OUTPUT = "kustomize/overlays/usc1-prod/jobs/team-llm/train-a.yaml"
EDITED = "jobs/vision/devbox.yaml"  # another job's spec, edited but not committed


@pytest.fixture(autouse=True)
def rendered(repo) -> None:
    """The scratch repository's rendered tree, fresh for the generator under test (a submit
    refuses a stale base; that refusal has a test of its own)."""
    assert gkr("render").exit_code == 0
    handle = git.Repo(repo)
    handle.git.add("--all", "--", "kustomize", "platform", "terraform")
    if handle.is_dirty():
        handle.index.commit("render")


@pytest.fixture
def env(tmp_path) -> Path:
    path = tmp_path / "env.yaml"
    path.write_text("# read by the trainer\nWANDB_PROJECT: pretrain\n")
    return path


def snapshot(root: Path) -> dict[str, object]:
    """Everything of the user's checkout that a submit must leave as it was."""
    handle = git.Repo(root)
    return {"HEAD": (Path(handle.git_dir) / "HEAD").read_text(),
            "head": handle.head.commit.hexsha,
            "index": (Path(handle.git_dir) / "index").read_bytes(),
            # .gkr/ holds gkr's disposable caches (ignored by the real repository's .gitignore)
            "status": handle.git.status("--porcelain", "--untracked-files=all", "--", ".",
                                        ":!.gkr"),
            "files": {p: p.read_bytes() for p in sorted((root / "jobs").rglob("*"))
                      if p.is_file()},
            "worktrees": handle.git.worktree("list")}


def branch_files(root: Path, branch: str) -> set[str]:
    """The paths the branch's commit changes against its parent."""
    commit = git.Repo(root).commit(branch)
    return set(commit.stats.files)


def checkout(root: Path, branch: str, where: Path) -> Path:
    """A separate clone of the branch, as a reviewer or CI would check it out."""
    git.Repo(root).clone(where, branch=branch)
    return where


def edit_other_spec(root: Path) -> bytes:
    """An edit that changes what the spec renders to."""
    spec = root / EDITED
    spec.write_text(spec.read_text().replace("cpus: 24", "cpus: 20"))
    return spec.read_bytes()


def test_commit_holds_the_job_alone_and_passes_render_check(repo, apiserver, env, tmp_path,
                                                            monkeypatch):
    before = snapshot(repo)
    result = gkr(*SUBMIT, "--env", str(env), "--gitops")
    assert result.exit_code == 0, result.output
    assert "on branch gkr/submit-llm-train-a" in result.output
    assert snapshot(repo) == before  # no branch switch, no file written, index untouched
    changed = branch_files(repo, "gkr/submit-llm-train-a")
    assert {SPEC, ENV, OUTPUT} <= changed
    assert all(p.startswith("kustomize/") for p in changed - {SPEC, ENV})
    clone = checkout(repo, "gkr/submit-llm-train-a", tmp_path / "review")
    assert (clone / ENV).read_text() == env.read_text()  # copied as written, comments kept
    spec = (clone / SPEC).read_text()
    assert "env_file: env/train-a.yaml" in spec and "WANDB_PROJECT" not in spec
    monkeypatch.chdir(clone)
    assert gkr("render", "--check").exit_code == 0
    catalog = Catalog(clone)
    assert validate_tree(render_tree(clone, catalog), catalog, kustomize=True) > 0
    assert not apiserver.requests
    # What Argo CD will sync is gated like a direct submit: the driver runs the preflight.
    (rayjob, _policy) = yaml.safe_load_all((clone / OUTPUT).read_text())
    assert rayjob["spec"]["entrypoint"] == "python -m runtime.preflight.gate"


def test_uncommitted_edit_survives_a_failing_and_a_succeeding_submit(repo, env, tmp_path,
                                                                    monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    edited = edit_other_spec(repo)
    (repo / "notes.txt").write_text("untracked\n")
    hook = Path(git.Repo(repo).git_dir) / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho refused by hook >&2\nexit 1\n")
    hook.chmod(0o755)
    before = snapshot(repo)
    failed = gkr(*SUBMIT, "--env", str(env), "--gitops")
    assert failed.exit_code == 4 and "git commit failed" in failed.error
    assert "refused by hook" in failed.error
    assert snapshot(repo) == before
    assert "gkr/submit-llm-train-a" not in git.Repo(repo).heads
    assert not any(scratch.iterdir())  # the temporary worktree is gone
    hook.unlink()
    assert gkr(*SUBMIT, "--env", str(env), "--gitops").exit_code == 0
    assert (repo / EDITED).read_bytes() == edited
    assert (repo / "notes.txt").read_text() == "untracked\n"
    # The edit is not the submit's to commit, nor is its re-rendered output.
    assert not any(scratch.iterdir())
    # The edit is not the submit's to commit, nor is its re-rendered output: the branch
    # renders to itself.
    changed = branch_files(repo, "gkr/submit-llm-train-a")
    assert EDITED not in changed and not any("devbox" in p for p in changed)
    monkeypatch.chdir(checkout(repo, "gkr/submit-llm-train-a", tmp_path / "review"))
    assert gkr("render", "--check").exit_code == 0


def test_detached_head_works_and_stays_detached(repo, env):
    handle = git.Repo(repo)
    handle.git.checkout("--detach")
    before = snapshot(repo)
    result = gkr(*SUBMIT, "--env", str(env), "--gitops")
    assert result.exit_code == 0, result.output
    assert snapshot(repo) == before and handle.head.is_detached
    assert handle.commit("gkr/submit-llm-train-a").parents == (handle.head.commit,)


def test_another_jobs_env_file_and_spec_are_never_replaced(repo, tmp_path):
    shared = repo / "jobs/llm/env/pretrain.yaml"
    original = shared.read_bytes()
    mine = tmp_path / "mine.yaml"
    mine.write_text("WANDB_PROJECT: mine\n")
    taken = gkr("submit", "pretrain", *SUBMIT[2:], "--env", str(mine), "--gitops")
    assert taken.exit_code == 1
    assert "jobs/llm/env/pretrain.yaml exists already" in taken.error
    assert "another job's env file" in taken.error
    assert shared.read_bytes() == original
    same_name = gkr("submit", "llm-dev", *SUBMIT[2:], "--gitops")
    assert same_name.exit_code == 1 and "jobs/llm/llm-dev.yaml exists already" in same_name.error
    assert [h.name for h in git.Repo(repo).heads] == ["main"]


def test_stale_base_is_refused_naming_gkr_render(repo, env):
    spec = repo / EDITED
    spec.write_text(spec.read_text().replace("cpus: 24", "cpus: 20"))
    handle = git.Repo(repo)
    handle.index.add([EDITED])
    handle.index.commit("edit a spec without rendering")
    result = gkr(*SUBMIT, "--env", str(env), "--gitops")
    assert result.exit_code == 3, result.output
    assert "`gkr render`" in result.error and "devbox.yaml" in result.error
    assert [h.name for h in handle.heads] == ["main"]


def test_branch_option_and_an_existing_branch(repo, env):
    named = gkr(*SUBMIT, "--env", str(env), "--gitops", "--branch", "alice/train-a")
    assert named.exit_code == 0 and "on branch alice/train-a" in named.output
    again = gkr(*SUBMIT, "--env", str(env), "--gitops", "--branch", "alice/train-a")
    assert again.exit_code == 1 and "--branch" in again.error and "exists" in again.error
    invalid = gkr(*SUBMIT, "--gitops", "--branch", "a..b")
    assert invalid.exit_code == 1 and "--branch 'a..b'" in invalid.error
    alone = gkr(*SUBMIT, "--dry-run", "--branch", "x")
    assert alone.exit_code == 1 and "--gitops" in alone.error


def test_base_option(repo, env):
    handle = git.Repo(repo)
    first = handle.head.commit
    (repo / "README.extra").write_text("later\n")
    handle.index.add(["README.extra"])
    handle.index.commit("a later commit")
    result = gkr(*SUBMIT, "--env", str(env), "--gitops", "--base", first.hexsha)
    assert result.exit_code == 0, result.output
    assert handle.commit("gkr/submit-llm-train-a").parents == (first,)
    unknown = gkr(*SUBMIT, "--gitops", "--branch", "other", "--base", "no-such-ref")
    assert unknown.exit_code == 1 and "--base 'no-such-ref'" in unknown.error


def spec_draft(repo: Path, name: str) -> Path:
    """A copy of a committed spec outside jobs/ (not rendered), reading env/vars.yaml beside
    it."""
    folder = repo / "drafts"
    (folder / "env").mkdir(parents=True)
    (folder / "env/vars.yaml").write_text("WANDB_PROJECT: mine\n")
    spec = (repo / "jobs/llm/llm-pretrain-7b.yaml").read_text()
    path = folder / f"{name}.yaml"
    path.write_text("\n".join(line for line in spec.splitlines()
                              if not line.startswith("env_file:"))
                    + "\nenv_file: env/vars.yaml\n")
    return path


def test_spec_file_env_file_travels_with_it(repo, tmp_path):
    spec = spec_draft(repo, "train-b")
    result = gkr("submit", "-f", str(spec), "--namespace", "team-llm", "--gitops")
    assert result.exit_code == 0, result.output
    changed = branch_files(repo, "gkr/submit-llm-train-b")
    assert {"jobs/llm/train-b.yaml", "jobs/llm/env/train-b.yaml"} <= changed
    commit = git.Repo(repo).commit("gkr/submit-llm-train-b")
    assert (commit.tree / "jobs/llm/env/train-b.yaml").data_stream.read() == \
        b"WANDB_PROJECT: mine\n"


def test_repository_in_a_subfolder_of_the_git_repository(repo, env, tmp_path, monkeypatch):
    mono = tmp_path / "mono"
    shutil.copytree(repo, mono / "infra", ignore=shutil.ignore_patterns(".git"))
    commit_all(mono, "monorepo")
    monkeypatch.chdir(mono / "infra")
    result = gkr(*SUBMIT, "--env", str(env), "--gitops")
    assert result.exit_code == 0, result.output
    assert {f"infra/{SPEC}", f"infra/{ENV}", f"infra/{OUTPUT}"} <= branch_files(
        mono, "gkr/submit-llm-train-a")


def test_outside_a_git_repository(repo, tmp_path):
    shutil.rmtree(repo / ".git")
    spec = spec_draft(repo, "train-b")
    result = gkr("submit", "-f", str(spec), "--namespace", "team-llm", "--gitops")
    assert result.exit_code == 1 and "not in a git repository" in result.error


def test_local_working_dir_is_in_the_store_before_the_branch_names_it(repo, env, tmp_path):
    code = repo / "code"  # only folders inside the repository or the cwd are shipped
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    result = gkr(*SUBMIT, "--working-dir", str(code), "--gitops")
    assert result.exit_code == 0, result.output
    commit = git.Repo(repo).commit("gkr/submit-llm-train-a")
    spec = yaml.safe_load((commit.tree / SPEC).data_stream.read())
    # The job runs once the pull request merges: its code must already be in the store.
    assert Path(spec["working_dir"].removeprefix("file://")).is_file()


def test_without_git_on_path(repo, tmp_path, monkeypatch):
    spec = spec_draft(repo, "train-b")
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    result = gkr("submit", "-f", str(spec), "--namespace", "team-llm", "--gitops")
    assert result.exit_code == 4 and "needs git" in result.error
