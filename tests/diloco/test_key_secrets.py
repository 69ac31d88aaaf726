"""`gkr diloco keys SPEC`: the committed cross-region experiment's keys as Secrets, each on
its part's cluster, through the real `kubernetes` client against two Kubernetes API test
doubles (testing/doubles/kube_apiserver.py: no real API server can run here), one per
cluster, reached by their kube contexts in one kubeconfig."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
import zmq

from runtime.diloco.keys import ClientKeys, client_keys, server_keys
from runtime.identity import Label
from testing.doubles.kube_apiserver import KubeApiServer
from tests.cli.conftest import gkr

REPO = Path(__file__).resolve().parents[2]
SPEC = "jobs/llm/llm-diloco-7b.yaml"
US = "gke_reve-train-prod_us-central1_usc1-prod"  # the synchroniser's and learner us's
EU = "gke_reve-train-eu_europe-west4_euw4-prod"  # learner eu's
NS = "team-llm"


@pytest.fixture
def clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, KubeApiServer]]:
    with KubeApiServer() as us, KubeApiServer() as eu:
        doubles = {US: us, EU: eu}
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": US,
            "clusters": [{"name": c, "cluster": {"server": d.url}} for c, d in doubles.items()],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": c, "context": {"cluster": c, "user": "tester"}}
                         for c in doubles]}))
        monkeypatch.setenv("KUBECONFIG", str(path))
        monkeypatch.chdir(REPO)
        yield doubles


def _files(double: KubeApiServer, name: str, folder: Path) -> Path:
    """A Secret's files as its pod's volume would hold them."""
    secret = double.get("", "secrets", NS, name)
    assert secret is not None, name
    folder.mkdir()
    for key, value in secret["data"].items():
        (folder / key).write_bytes(base64.b64decode(value))
    return folder


def test_each_part_gets_a_secret_with_only_its_own_keys(
        clusters: dict[str, KubeApiServer], tmp_path: Path) -> None:
    ran = gkr("diloco", "keys", SPEC)
    assert ran.code == 0, ran.err
    us, eu = clusters[US], clusters[EU]
    assert sorted(s["metadata"]["name"] for s in us.objects("", "secrets")) == [
        "llm-diloco-7b-diloco-keys", "llm-diloco-7b-us-diloco-keys"]
    assert [s["metadata"]["name"] for s in eu.objects("", "secrets")] == [
        "llm-diloco-7b-eu-diloco-keys"]
    sync = _files(us, "llm-diloco-7b-diloco-keys", tmp_path / "sync")
    learners = {"us": _files(us, "llm-diloco-7b-us-diloco-keys", tmp_path / "us"),
                "eu": _files(eu, "llm-diloco-7b-eu-diloco-keys", tmp_path / "eu")}
    assert sorted(p.name for p in sync.iterdir()) == [
        "learner.eu.public", "learner.us.public", "synchroniser.secret"]
    for name, folder in learners.items():
        assert sorted(p.name for p in folder.iterdir()) == [
            f"learner.{name}.secret", "synchroniser.public"]
    server = server_keys(sync, ("us", "eu"))
    held: dict[str, ClientKeys] = {name: client_keys(folder, name)
                                   for name, folder in learners.items()}
    for name, keys in held.items():
        assert keys.server == server.public and server.learners[keys.public] == name
        assert zmq.curve_public(keys.secret) == keys.public
    # no secret key leaves its party: the synchroniser's Secret holds no learner's secret
    secrets = {keys.secret for keys in held.values()} | {server.secret}
    for folder in (sync, *learners.values()):
        others = secrets - {(folder / f).read_text().strip().encode()
                            for f in (p.name for p in folder.iterdir()) if f.endswith("secret")}
        text = "".join(p.read_text() for p in folder.iterdir())
        assert not any(secret.decode() in text for secret in others)
    labels = us.get("", "secrets", NS, "llm-diloco-7b-us-diloco-keys")["metadata"]["labels"]
    assert (labels[Label.RUN], labels[Label.LEARNER]) == ("llm-diloco-7b", "us")


def test_existing_keys_are_kept_unless_rotated(clusters: dict[str, KubeApiServer]) -> None:
    assert gkr("diloco", "keys", SPEC).code == 0
    first = clusters[EU].get("", "secrets", NS, "llm-diloco-7b-eu-diloco-keys")
    again = gkr("diloco", "keys", SPEC)
    assert again.code != 0 and "keys exist already" in again.err and "--rotate" in again.err
    assert clusters[EU].get("", "secrets", NS, "llm-diloco-7b-eu-diloco-keys") == first
    assert gkr("diloco", "keys", SPEC, "--rotate").code == 0
    rotated = clusters[EU].get("", "secrets", NS, "llm-diloco-7b-eu-diloco-keys")
    assert rotated is not None and first is not None and rotated["data"] != first["data"]


def test_a_spec_without_diloco_is_refused(clusters: dict[str, KubeApiServer]) -> None:
    plain = next(p for p in sorted((REPO / "jobs").rglob("*.yaml"))
                 if "diloco" not in p.read_text() and "/env/" not in str(p))
    ran = gkr("diloco", "keys", str(plain.relative_to(REPO)))
    assert ran.code != 0 and "no diloco section" in ran.err
    assert not clusters[US].objects("", "secrets")
