"""The shared Kubernetes layer (runtime.kube) against the API test double over real HTTP,
reached through a real kubeconfig (testing/doubles/kube_apiserver.py: no API server runs here)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from generator.catalog import Catalog
from generator.cli import main
from runtime.errors import Category, ConfigError
from runtime.kube import (
    NODE,
    POD,
    RAYJOB,
    Conflict,
    Invalid,
    Kube,
    KubeError,
    NotFound,
    Patch,
    Unreachable,
)
from testing.doubles.kube_apiserver import KubeApiServer

NS = "team-llm"
CONTEXT = "double"


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as double:
        yield double


@pytest.fixture
def kube(server: KubeApiServer, tmp_path: Path) -> Kube:
    return Kube.connect(CONTEXT, str(server.write_kubeconfig(tmp_path / "kubeconfig", CONTEXT)))


def rayjob(entrypoint: str = "python -m runtime.train a.yaml") -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "train-a", "namespace": NS, "labels": {"app": "train"}},
            "spec": {"entrypoint": entrypoint}}


def pod(name: str, namespace: str = NS, node: str = "n1", app: str = "a",
        containers: tuple[str, ...] = ("main",)) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
            "spec": {"nodeName": node, "containers": [{"name": c, "image": "i"}
                                                      for c in containers]}}


def node(name: str, pool: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                                                             "labels": {"pool": pool}}}


def test_apply_creates_then_updates_with_the_field_manager(server, kube):
    created = kube.apply(rayjob())
    assert created["metadata"]["generation"] == 1
    updated = kube.apply(rayjob("python -m runtime.train b.yaml"))
    assert updated["metadata"]["generation"] == 2
    assert server.get("ray.io", "rayjobs", NS, "train-a")["spec"]["entrypoint"].endswith("b.yaml")
    sent = server.requests[-1]
    assert (sent.method, sent.path) == ("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/train-a")
    assert sent.content_type == "application/apply-patch+yaml"
    assert sent.query == {"fieldManager": "gkr", "force": "true"}
    # A kind of the static table costs no discovery round trip.
    assert all(r.path.startswith("/apis/ray.io/v1/namespaces/") for r in server.requests)


def test_apply_conflict_carries_the_server_message(kube):
    kube.apply(rayjob())
    with pytest.raises(Conflict) as raised:
        kube.apply(rayjob("edited by hand"), force=False, field_manager="kubectl")
    message = str(raised.value)
    assert message.startswith(f"apply RayJob {NS}/train-a: Apply failed with 1 conflict")
    assert message.endswith("(HTTP 409)") and ".spec.entrypoint" in message
    assert "header" not in message.lower()
    assert (raised.value.status, raised.value.reason) == (409, "Conflict")
    assert raised.value.category == Category.SERVICE


def test_missing_object_is_not_found_an_input_error(kube):
    with pytest.raises(NotFound) as raised:
        kube.get(RAYJOB, "nope", namespace=NS)
    assert str(raised.value) == (f'get RayJob {NS}/nope: rayjobs.ray.io "nope" not found '
                                 "(HTTP 404)")
    assert raised.value.category == Category.INVALID_INPUT == 1
    assert kube.find(RAYJOB, "nope", namespace=NS) is None


def test_create_refuses_a_taken_name_and_an_invalid_one(kube):
    kube.create(pod("p1"))
    with pytest.raises(Conflict, match='create Pod team-llm/p1: pods "p1" already exists'):
        kube.create(pod("p1"))
    with pytest.raises(Invalid) as raised:
        kube.create(pod("Not_A_Name"))
    assert raised.value.status == 422 and raised.value.category == Category.INVALID_INPUT
    assert "a lowercase RFC 1123 subdomain" in str(raised.value)


def test_list_by_namespace_labels_fields_and_cluster_scope(server, kube):
    for obj in (pod("a1", app="a", node="n1"), pod("a2", app="a", node="n2"),
                pod("b1", "team-vision", app="a", node="n1"), pod("c1", app="c", node="n1"),
                node("n1", "gpu"), node("n2", "cpu")):
        server.put(obj)

    def names(found: list[dict[str, Any]]) -> list[str]:
        return sorted(o["metadata"]["name"] for o in found)

    assert names(kube.list(POD, namespace=NS, labels="app=a")) == ["a1", "a2"]
    assert names(kube.list(POD, labels="app=a")) == ["a1", "a2", "b1"]  # every namespace
    assert names(kube.list(POD, fields="spec.nodeName=n1")) == ["a1", "b1", "c1"]
    assert names(kube.list(POD, labels="app!=c", fields="spec.nodeName=n1")) == ["a1", "b1"]
    assert names(kube.list(NODE, labels="pool=gpu")) == ["n1"]
    assert server.requests[-1].path == "/api/v1/nodes"


def test_events_of_one_object(server, kube):
    for name, about in (("e1", "n1"), ("e2", "n2")):
        server.put({"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": name, "namespace": "default"},
                    "involvedObject": {"kind": "Node", "name": about}, "reason": "Xid"})
    assert [e["metadata"]["name"] for e in kube.events(kind="Node", name="n1")] == ["e1"]
    assert len(kube.events(namespace="default")) == 2


def test_watch_yields_changes_until_the_server_closes_it(server, kube):
    since = kube.create(pod("before"))["metadata"]["resourceVersion"]

    def controller() -> None:  # acts once the watch is open, so every change is after it
        while not any(r.query.get("watch") == "true" for r in list(server.requests)):
            time.sleep(0.02)
        server.put(pod("w1", app="watched"))
        server.put(pod("other", app="not-watched"))
        server.put({**pod("w1", app="watched"), "status": {"phase": "Running"}})
        server.delete("", "pods", NS, "w1")

    threading.Thread(target=controller, daemon=True).start()
    events = list(kube.watch(POD, namespace=NS, labels="app=watched", timeout_s=2, since=since))
    assert [(kind, obj["metadata"]["name"]) for kind, obj in events] == [
        ("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]
    assert events[1][1]["status"] == {"phase": "Running"}  # plain dicts, every field kept
    opened = next(r for r in server.requests if r.query.get("watch") == "true")
    assert opened.query["timeoutSeconds"] == "2" and opened.query["resourceVersion"] == since


def test_logs_tail_container_and_follow(server, kube):
    server.put(pod("p", containers=("main", "sidecar")))
    server.set_log(NS, "p", "main", "one\ntwo\nthree\n")
    server.set_log(NS, "p", "sidecar", "side\n")
    assert list(kube.logs("p", namespace=NS, container="main", tail=2)) == ["two", "three"]
    assert list(kube.logs("p", namespace=NS, container="sidecar")) == ["side"]
    server.set_log(NS, "p", "sidecar", "done\n{\"passed\": true}")  # no final newline
    assert list(kube.logs("p", namespace=NS, container="sidecar")) == ["done", '{"passed": true}']

    server.set_log(NS, "p", "main", "first\n", follow=True)
    lines = kube.logs("p", namespace=NS, container="main", follow=True)
    assert next(lines) == "first"  # arrives before the container writes more
    server.append_log(NS, "p", "main", "second\n", end=True)
    assert list(lines) == ["second"]


def test_patch_types(server, kube):
    server.put(pod("p"))
    merged = kube.patch(POD, "p", {"metadata": {"labels": {"x": "1"}}}, namespace=NS)
    assert merged["metadata"]["labels"] == {"app": "a", "x": "1"}
    ops = [{"op": "replace", "path": "/metadata/labels/app", "value": "b"}]
    patched = kube.patch(POD, "p", ops, namespace=NS, patch_type=Patch.JSON)
    assert patched["metadata"]["labels"] == {"app": "b", "x": "1"}
    sidecar = {"spec": {"containers": [{"name": "sidecar", "image": "s"}]}}
    strategic = kube.patch(POD, "p", sidecar, namespace=NS, patch_type=Patch.STRATEGIC)
    assert [c["name"] for c in strategic["spec"]["containers"]] == ["main", "sidecar"]
    assert [r.content_type for r in server.requests if r.method == "PATCH"] == [
        Patch.MERGE, Patch.JSON, Patch.STRATEGIC]
    kube.apply(rayjob())
    with pytest.raises(KubeError) as raised:  # custom resources have no strategic merge
        kube.patch(RAYJOB, "train-a", {"spec": {}}, namespace=NS, patch_type=Patch.STRATEGIC)
    assert raised.value.status == 415 and "(HTTP 415)" in str(raised.value)


def test_node_patch_is_cluster_scoped(server, kube):
    server.put(node("n1", "gpu"))
    patched = kube.patch(NODE, "n1", {"spec": {"unschedulable": True}})
    assert patched["spec"]["unschedulable"] is True
    assert server.requests[-1].path == "/api/v1/nodes/n1"


def test_evict_goes_through_the_eviction_subresource(server, kube):
    server.put(pod("p"))
    kube.evict("p", namespace=NS)
    sent = server.requests[-1]
    assert (sent.method, sent.path) == ("POST", f"/api/v1/namespaces/{NS}/pods/p/eviction")
    assert json.loads(sent.raw)["kind"] == "Eviction"
    assert server.get("", "pods", NS, "p") is None
    with pytest.raises(NotFound):
        kube.evict("p", namespace=NS)


def test_a_kind_outside_the_table_is_discovered_once(server, kube):
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "c", "namespace": NS}, "data": {"k": "v"}}
    kube.apply(config)
    kube.apply({**config, "data": {"k": "w"}})
    assert server.get("", "configmaps", NS, "c")["data"] == {"k": "w"}
    applied = [r.path for r in server.requests if r.method == "PATCH"]
    assert applied == [f"/api/v1/namespaces/{NS}/configmaps/c"] * 2
    discovery = [r for r in server.requests if r.method == "GET"]
    assert discovery and len(server.requests) - len(discovery) == 2
    with pytest.raises(NotFound, match="Widget") as raised:
        kube.apply({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w", "namespace": NS}})
    assert raised.value.category == Category.INVALID_INPUT


def test_no_answer_is_unreachable_and_quick(tmp_path):
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        kubeconfig = tmp_path / "kubeconfig"
        with KubeApiServer() as double:
            double.write_kubeconfig(kubeconfig, CONTEXT)
        text = kubeconfig.read_text().replace(double.url, f"http://127.0.0.1:{port}")
        kubeconfig.write_text(text)
        kube = Kube.connect(CONTEXT, str(kubeconfig), timeout_s=0.2)
        started = time.monotonic()
        with pytest.raises(Unreachable) as raised:
            kube.list(POD, namespace=NS)
    assert time.monotonic() - started < 20  # a few 0.2 s attempts, not a default timeout
    assert raised.value.category == Category.SERVICE == 4
    assert str(raised.value).startswith(f"list pods in {NS}: no answer from http://127.0.0.1")
    assert "timed out" in str(raised.value)


def test_refused_connection_is_unreachable(tmp_path):
    with KubeApiServer() as double:
        kubeconfig = double.write_kubeconfig(tmp_path / "kubeconfig", CONTEXT)
    kube = Kube.connect(CONTEXT, str(kubeconfig), timeout_s=0.5)  # the double is closed now
    with pytest.raises(Unreachable, match="Connection refused"):
        kube.get(NODE, "n1")


def test_an_unknown_context_is_a_config_error(server, tmp_path):
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", CONTEXT)
    with pytest.raises(ConfigError, match="context 'elsewhere'") as raised:
        Kube.connect("elsewhere", str(kubeconfig))
    assert raised.value.category == Category.INVALID_INPUT and str(kubeconfig) in str(
        raised.value)


def test_kubeconfig_comes_from_the_environment_at_connect(server, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kc", "later")))
    assert Kube.connect("later").host == server.url


@pytest.mark.parametrize(("serving", "args", "code", "says"), [
    (True, ["status", "nope"], 1, "no rayjob, raycluster or job named 'nope'"),
    (False, ["list"], 4, f"list rayjobs in {NS} matching "),
])
def test_the_cli_exits_with_the_category_of_the_error(tmp_path, monkeypatch, capsys, serving,
                                                      args, code, says):
    """`gkr`'s main() turns a runtime error into a message and its category's exit code."""
    root = Path(__file__).parents[2]
    context = Catalog(root).clusters["usc1-prod"].kube_context
    with KubeApiServer() as double:
        monkeypatch.setenv("KUBECONFIG", str(double.write_kubeconfig(tmp_path / "kc", context)))
        monkeypatch.chdir(root)
        monkeypatch.setattr(sys, "argv", ["gkr", *args, "--cluster", "usc1-prod", "-n", NS])
        if not serving:
            double.close()
        with pytest.raises(SystemExit) as exited:
            main()
    assert exited.value.code == code
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and "Traceback" not in err


def test_importing_the_layer_or_the_cli_does_not_import_kubernetes():
    """`gkr --help` stays fast: `kubernetes` loads only when a command connects."""
    code = ("import sys, runtime.kube, generator.cli; "
            "sys.exit('kubernetes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parents[2], check=False)
    assert done.returncode == 0, done.stderr or "generator.cli imported kubernetes"
