"""`gkr images`: a real build (buildah, chroot isolation, vfs), a real push to Debian's
docker-registry (the CNCF distribution registry) on 127.0.0.1, a digest checked with skopeo,
then the pin, the provenance lock and the re-rendered tree, through the CLI as a user runs it.

The repository is a committed copy of ours whose Containerfile has the real one's stages but
starts FROM scratch: the real bases (NVIDIA's CUDA images) cannot be pulled here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import git
import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
GKR = [str(Path(sys.executable).parent / "gkr")]  # the console script, as a user runs it
TOOLS = ("buildah", "skopeo", "docker-registry")
DATA = ("clusters", "jobs", "platform", "kustomize", "terraform", "configs")
FILES = ("pyproject.toml", "requirements.lock", "README.md", ".containerignore")
CONTAINERFILE = """\
FROM scratch AS gkr-runtime
COPY pyproject.toml /gkr/
COPY README.md /gkr/README.md
FROM gkr-runtime AS trainer
COPY requirements.lock /gkr/
FROM trainer AS devbox
"""

needs_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in TOOLS),
    reason="buildah, skopeo and docker-registry are Debian packages (`make image-tools`)")


def gkr(root: Path, *args: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GKR, *args, "--root", str(root)], capture_output=True, text=True,
                          env=env, cwd=root, timeout=300, check=False)


def commit(root: Path, message: str) -> str:
    repo = git.Repo(root)
    repo.git.add("--all")
    return repo.index.commit(message).hexsha


def snapshot(root: Path) -> dict[str, str]:
    """A hash of every file of the catalog and the rendered tree."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in ("platform", "kustomize", "terraform") for p in (root / folder).rglob("*")
            if p.is_file()}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for folder in DATA:
        shutil.copytree(ROOT / folder, root / folder)
    for name in FILES:
        shutil.copy(ROOT / name, root / name)
    (root / "platform/images/Containerfile").write_text(CONTAINERFILE)
    handle = git.Repo.init(root, initial_branch="main")
    with handle.config_writer() as config:
        config.set_value("user", "email", "tester@reve.ai")
        config.set_value("user", "name", "Tester")
    commit(root, "initial")
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """buildah's storage in the test's folder (containers-storage.conf), vfs: no overlay here."""
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\nrunroot = "{tmp_path}/run"\n'
                    f'graphroot = "{tmp_path}/storage"\n')
    return {**os.environ, "CONTAINERS_STORAGE_CONF": str(conf), "PYTHONPATH": str(ROOT)}


class Registry:
    def __init__(self, folder: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = folder / "registry.yml"
        config.write_text("version: 0.1\nstorage:\n  filesystem:\n"
                          f"    rootdirectory: {folder}/data\n"
                          f"http:\n  addr: 127.0.0.1:{self.port}\n")
        self.process = subprocess.Popen(["docker-registry", "serve", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v2/", timeout=2)
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("docker-registry did not start") from None
                time.sleep(0.1)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def digest(self, reference: str) -> str:
        shown = subprocess.run(["skopeo", "inspect", "--tls-verify=false",
                                f"docker://{reference}"], capture_output=True, text=True,
                               check=True)
        return str(json.loads(shown.stdout)["Digest"])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    running = Registry(tmp_path)
    yield running
    running.stop()


def catalog(root: Path) -> dict[str, str]:
    text = (root / "platform/catalog/images.yaml").read_text()
    return dict(YAML(typ="safe").load(text)["images"])


def lock(root: Path) -> dict[str, dict[str, str]]:
    return dict(YAML(typ="safe").load((root / "platform/catalog/images.lock").read_text()))


def build(root: Path, registry: Registry, env: dict[str, str], name: str = "trainer"
          ) -> subprocess.CompletedProcess[str]:
    return gkr(root, "images", "build", name, "--registry", f"{registry.host}/reve",
               "--no-tls-verify", env=env)


@pytest.mark.slow
@needs_tools
def test_a_build_is_pushed_pinned_with_provenance_and_reaches_the_pods_and_the_precache(
        repo: Path, registry: Registry, env: dict[str, str]) -> None:
    head = git.Repo(repo).head.commit.hexsha
    done = build(repo, registry, env)
    assert done.returncode == 0, done.stderr
    pushed = registry.digest(f"{registry.host}/reve/trainer:{head[:12]}")
    reference = f"{registry.host}/reve/trainer@{pushed}"
    assert catalog(repo)["trainer"] == reference
    text = (repo / "platform/catalog/images.yaml").read_text()
    assert "# Name → the stage of platform/images/Containerfile" in text  # comments kept
    assert list(catalog(repo))[:2] == ["trainer", "trainer-nightly"]  # order kept
    record = lock(repo)["trainer"]
    assert (record["kind"], record["digest"], record["commit"], record["stage"]) == (
        "built", pushed, head, "trainer")
    # The pods of a job on the trainer image and every GPU node's pre-cache pull that digest.
    pods = (repo / "kustomize/overlays/usc1-prod/jobs/team-llm/llm-pretrain-7b.yaml").read_text()
    assert reference in pods
    for cluster in ("usc1-prod", "euw4-prod"):
        precache = (repo / f"kustomize/overlays/{cluster}/platform/image-precache.yaml")
        assert reference in precache.read_text()
    commit(repo, "pin trainer")
    valid = gkr(repo, "validate", env=env)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert "trainer," not in valid.stdout.split("placeholders", 1)[-1]


@pytest.mark.slow
@needs_tools
def test_the_same_commit_builds_the_same_digest_and_a_changed_layer_another(
        repo: Path, registry: Registry, env: dict[str, str]) -> None:
    assert build(repo, registry, env, "gkr-runtime").returncode == 0
    first = catalog(repo)["gkr-runtime"]
    commit(repo, "pin")
    assert build(repo, registry, env, "gkr-runtime").returncode == 0
    assert catalog(repo)["gkr-runtime"] == first  # reproducible: same sources, same digest
    (repo / "README.md").write_text((repo / "README.md").read_text() + "\nA one-line change.\n")
    commit(repo, "a code change")
    assert build(repo, registry, env, "gkr-runtime").returncode == 0
    assert catalog(repo)["gkr-runtime"] != first


@pytest.mark.slow
@needs_tools
def test_a_registry_that_is_down_leaves_the_catalog_and_the_tree_as_they_were(
        repo: Path, registry: Registry, env: dict[str, str]) -> None:
    registry.stop()
    before = snapshot(repo)
    done = build(repo, registry, env)
    assert done.returncode == 4, done.stderr
    assert "pushing" in done.stderr and "failed" in done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(repo) == before


@pytest.mark.slow
@needs_tools
def test_a_definition_that_does_not_build_is_a_clear_error(
        repo: Path, registry: Registry, env: dict[str, str]) -> None:
    (repo / "platform/images/Containerfile").write_text(
        CONTAINERFILE + "COPY no-such-file /x\n")
    commit(repo, "broken definition")
    before = snapshot(repo)
    done = build(repo, registry, env, "devbox")
    assert done.returncode == 4
    assert "building devbox (stage devbox) failed" in done.stderr
    assert "no-such-file" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(repo) == before


@pytest.mark.slow
@needs_tools
def test_an_upstream_tag_is_resolved_to_the_registrys_digest(
        repo: Path, registry: Registry, env: dict[str, str]) -> None:
    upstream = f"{registry.host}/upstream/pause:3.10"
    (repo / "ctx").mkdir()
    (repo / "ctx/Containerfile").write_text("FROM scratch\nCOPY Containerfile /pause\n")
    for argv in (["buildah", "bud", "--isolation", "chroot", "-q", "-t", upstream, "ctx"],
                 ["buildah", "push", "-q", "--tls-verify=false", upstream]):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)
    shutil.rmtree(repo / "ctx")
    images = repo / "platform/catalog/images.yaml"
    images.write_text(images.read_text().replace("registry.k8s.io/pause:3.10", upstream))
    done = gkr(repo, "images", "pin", "pause", "--no-tls-verify", env=env)
    assert done.returncode == 0, done.stderr
    digest = registry.digest(upstream)
    assert catalog(repo)["pause"] == f"{registry.host}/upstream/pause@{digest}"
    assert lock(repo)["pause"]["source"] == upstream
    installer = repo / "kustomize/components/h200/nccl-installer.yaml"
    assert f"{registry.host}/upstream/pause@{digest}" in installer.read_text()


# --- refusals that need no build ----------------------------------------------------------------


def test_a_digest_edited_by_hand_or_without_provenance_is_refused(repo: Path) -> None:
    images = repo / "platform/catalog/images.yaml"
    text = images.read_text()
    trainer = catalog(repo)["trainer"]
    forged = trainer[:-8] + "deadbeef"
    images.write_text(text.replace(trainer, forged))
    done = gkr(repo, "validate", "--no-kustomize")
    assert done.returncode == 1
    line = text.splitlines().index(next(x for x in text.splitlines() if "  trainer:" in x)) + 1
    assert f"platform/catalog/images.yaml:{line}: images.trainer: the digest differs" in done.stderr
    images.write_text(text.replace("  pause: registry.k8s.io/pause:3.10",
                                   "  pause: registry.k8s.io/pause@sha256:" + "1" * 64))
    done = gkr(repo, "validate", "--no-kustomize")
    assert "images.pause: a digest without provenance" in done.stderr


def test_a_malformed_lock_names_its_file_line_and_field(repo: Path) -> None:
    path = repo / "platform/catalog/images.lock"
    path.write_text(path.read_text().replace("kind: placeholder", "kind: bought", 1))
    done = gkr(repo, "validate", "--no-kustomize")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "platform/catalog/images.lock:" in done.stderr and "kind" in done.stderr


def test_build_refuses_an_upstream_image_and_an_uncommitted_tree(repo: Path) -> None:
    done = gkr(repo, "images", "build", "pause")
    assert done.returncode == 1 and "'pause' is not built here" in done.stderr
    (repo / "README.md").write_text("changed\n")
    done = gkr(repo, "images", "build", "trainer")
    assert done.returncode == 1 and "uncommitted changes in what the image copies (README.md)" \
        in done.stderr


def test_a_job_cannot_name_an_upstream_image_by_tag(repo: Path) -> None:
    spec = repo / "jobs/llm/llm-pretrain-7b.yaml"
    spec.write_text(spec.read_text().replace("image: trainer", "image: pause"))
    done = gkr(repo, "validate", "--no-kustomize")
    assert done.returncode == 1
    assert "catalog image 'pause' is an upstream image by tag" in done.stderr
