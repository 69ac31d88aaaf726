"""Fixtures: a copy of the repository (its own git history) and the Kubernetes API test double
(testing/doubles/kube_apiserver.py: no real API server can run here) reached through a real
kubeconfig."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from testing.doubles.kube_apiserver import KubeApiServer

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"generator", "runtime", "testing", "tests", "benchmarks", "build", "examples"}
CONTEXT = "gke_reve-train-prod_us-central1_usc1-prod"  # usc1-prod's kube_context


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A committed copy of the catalog, templates' inputs and jobs, as the working directory."""
    root = tmp_path / "repo"
    for folder in sorted(ROOT.iterdir()):
        # The repository's data folders (catalog, specs, rendered tree), not code or tooling.
        if folder.is_dir() and folder.name not in SKIP and not folder.name.startswith("."):
            shutil.copytree(folder, root / folder.name)
    store = tmp_path / "code-store"
    cluster = root / "clusters/usc1-prod.yaml"
    data = cluster.read_text()
    cluster.write_text("\n".join(f"code_store: file://{store}" if line.startswith("code_store:")
                                 else line for line in data.splitlines()) + "\n")
    commit_all(root, "initial")
    monkeypatch.chdir(root)
    return root


def commit_all(root: Path, message: str) -> git.Repo:
    """A new git repository at `root` holding everything there in one commit."""
    handle = git.Repo.init(root, initial_branch="main")
    with handle.config_writer() as config:
        config.set_value("user", "email", "tester@reve.ai")
        config.set_value("user", "name", "Tester")
    handle.git.add("--all")
    handle.index.commit(message)
    return handle


@pytest.fixture
def apiserver(tmp_path, monkeypatch) -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        path = server.write_kubeconfig(tmp_path / "kubeconfig", CONTEXT)
        monkeypatch.setenv("KUBECONFIG", str(path))
        yield server
