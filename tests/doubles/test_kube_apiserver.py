"""The Kubernetes API test double answers the typed `kubernetes` client as a real API server does.

A test double because no API server can run on these machines; these tests hold it to the
behaviour the cluster and Warden suites rely on: the patch formats the typed client sends,
the status subresource's rule, selectors across namespaces, eviction, generated names, and
`Status` failures with the real codes and reasons.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.config import new_client_from_config
from kubernetes.dynamic import DynamicClient

from testing.doubles.kube_apiserver import KubeApiServer
from testing.doubles.kube_patch import PatchError, json_patch, strategic_merge_patch

STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def api(tmp_path) -> Iterator[tuple[KubeApiServer, k8s.CoreV1Api]]:
    with KubeApiServer() as server:
        client = new_client_from_config(str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        yield server, k8s.CoreV1Api(client)
        client.close()


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"pool": "gpu"}, "annotations": {"a": "1"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(namespace: str, name: str, on: str, containers: tuple[str, ...] = ("main",)) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
            "spec": {"nodeName": on, "containers": [
                {"name": c, "image": f"{c}:1"} for c in containers]},
            "status": {"phase": "Running"}}


def failure(raised: pytest.ExceptionInfo[ApiException]) -> tuple[int, str, str]:
    """The code, reason and message of the `Status` body of a failed call."""
    body = json.loads(raised.value.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == raised.value.status
    return body["code"], body["reason"], body["message"]


def send(server: KubeApiServer, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    """A raw request, for paths and content types the typed client never sends."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data, method=method,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_node_patches_as_the_typed_client_sends_them(api):
    server, core = api
    server.put(node("n1"))
    core.patch_node("n1", {"metadata": {"annotations": {"b": "2"}},
                           "spec": {"unschedulable": True},
                           "status": {"allocatable": {"nvidia.com/gpu": "0"}}})
    core.patch_node("n1", [{"op": "add", "path": "/metadata/labels/x~1y", "value": "z"},
                           {"op": "remove", "path": "/metadata/annotations/a"}])
    stored = server.get("", "nodes", "", "n1")
    assert stored["spec"] == {"unschedulable": True}
    assert stored["metadata"]["annotations"] == {"b": "2"}
    assert stored["metadata"]["labels"] == {"pool": "gpu", "x/y": "z"}
    assert stored["status"]["allocatable"] == {"nvidia.com/gpu": "8"}  # status subresource
    sent = [r.content_type for r in server.requests_to("PATCH", "/api/v1/nodes/n1")]
    assert sent == [STRATEGIC, JSON_PATCH]
    with pytest.raises(ApiException) as raised:
        core.patch_node("n1", [{"op": "test", "path": "/spec/unschedulable", "value": False}])
    assert failure(raised)[:2] == (422, "Invalid")
    with pytest.raises(ApiException) as raised:
        core.patch_node("n2", {"spec": {"unschedulable": True}})
    assert failure(raised) == (404, "NotFound", 'nodes "n2" not found')


def test_strategic_merge_merges_lists_by_key_and_merge_patch_replaces(api):
    server, core = api
    server.put(pod("team", "p", "n1", containers=("main", "sidecar")))
    core.patch_namespaced_pod("p", "team", {"spec": {"containers": [
        {"name": "main", "image": "main:2"}]}, "status": {"phase": "Failed"}})
    stored = server.get("", "pods", "team", "p")
    assert [(c["name"], c["image"]) for c in stored["spec"]["containers"]] == [
        ("main", "main:2"), ("sidecar", "sidecar:1")]
    assert stored["status"] == {"phase": "Running"}
    core.patch_namespaced_pod("p", "team", {"spec": {"containers": [
        {"name": "main", "image": "main:3"}]}}, _content_type="application/merge-patch+json")
    assert server.get("", "pods", "team", "p")["spec"]["containers"] == [
        {"name": "main", "image": "main:3"}]


def test_custom_resources_refuse_strategic_merge_and_stale_versions_conflict(api):
    server, core = api
    custom = k8s.CustomObjectsApi(core.api_client)
    current = server.put({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                          "metadata": {"name": "rc", "namespace": "team"},
                          "spec": {"workerGroupSpecs": [{"groupName": "gpu", "replicas": 4}]}})
    with pytest.raises(ApiException) as raised:
        custom.patch_namespaced_custom_object("ray.io", "v1", "team", "rayclusters", "rc",
                                              {"spec": {}}, _content_type=STRATEGIC)
    assert failure(raised)[:2] == (415, "UnsupportedMediaType")
    version = current["metadata"]["resourceVersion"]
    patch = {"metadata": {"resourceVersion": version}, "spec": {"workerGroupSpecs": []}}
    custom.patch_namespaced_custom_object("ray.io", "v1", "team", "rayclusters", "rc", patch)
    with pytest.raises(ApiException) as raised:  # the same version is now stale
        custom.patch_namespaced_custom_object("ray.io", "v1", "team", "rayclusters", "rc", patch)
    code, reason, message = failure(raised)
    assert (code, reason) == (409, "Conflict") and "the object has been modified" in message
    assert server.get("ray.io", "rayclusters", "team", "rc")["spec"] == {"workerGroupSpecs": []}


def test_label_and_field_selectors_across_namespaces(api):
    server, core = api
    for namespace, name, on in (("a", "p1", "n1"), ("b", "p2", "n1"), ("b", "p3", "n2")):
        server.put(pod(namespace, name, on))
    on_n1 = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in on_n1.items] == ["p1", "p2"]
    in_b = core.list_namespaced_pod("b", label_selector="app!=p2")
    assert [p.metadata.name for p in in_b.items] == ["p3"]
    with pytest.raises(ApiException) as raised:
        core.list_pod_for_all_namespaces(field_selector="spec.nodeNam=n1")
    assert failure(raised) == (400, "BadRequest", "field label not supported: spec.nodeNam")
    server.put({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "a"},
                "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "TaskHung"})
    selector = "involvedObject.kind=Node,involvedObject.name=n1"
    events = core.list_event_for_all_namespaces(field_selector=selector).items
    assert [e.reason for e in events] == ["TaskHung"]
    assert core.list_event_for_all_namespaces(field_selector="reason=Other").items == []


def test_eviction_generated_names_and_create_conflicts(api):
    server, core = api
    server.put(pod("team", "p", "n1"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "p", "namespace": "team"}}
    path = "/api/v1/namespaces/team/pods/p/eviction"
    assert send(server, "POST", path, {**eviction, "metadata": {"name": "q"}})[0] == 400
    code, status = send(server, "POST", path, eviction)
    assert (code, status["status"]) == (201, "Success")
    assert server.get("", "pods", "team", "p") is None
    code, status = send(server, "POST", path, eviction)
    assert (code, status["reason"], status["details"]["name"]) == (404, "NotFound", "p")

    event = k8s.CoreV1Event(metadata=k8s.V1ObjectMeta(generate_name="p.warden-"),
                            involved_object=k8s.V1ObjectReference(kind="Pod", name="p"),
                            reason="WardenDrainScheduled")
    created = core.create_namespaced_event("team", event)
    assert created.metadata.name.startswith("p.warden-")
    assert len(created.metadata.name) == len("p.warden-") + 5
    assert created.metadata.namespace == "team" and created.metadata.resource_version
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_event("team", created)
    assert failure(raised)[:2] == (409, "AlreadyExists")


def test_paths_and_verbs_the_server_does_not_serve(api):
    server, _ = api
    server.put(node("n1"))
    server.put(pod("team", "p", "n1"))
    assert send(server, "POST", "/api/v1/pods", pod("team", "q", "n1"))[0] == 405
    assert send(server, "GET", "/api/v1/namespaces/team/nodes/n1")[0] == 404
    assert send(server, "GET", "/api/v1/namespaces/team/pods/p/eviction")[0] == 405
    assert send(server, "GET", "/api/v1/namespaces/team/persistentvolumeclaims")[0] == 404
    code, status = send(server, "PATCH", "/api/v1/namespaces/team/pods/p", {}, "text/plain")
    assert (code, status["reason"]) == (415, "UnsupportedMediaType")


def test_the_dynamic_client_discovers_through_legacy_discovery(api, tmp_path):
    server, _ = api
    client = new_client_from_config(str(server.write_kubeconfig(tmp_path / "dynamic")))
    dynamic = DynamicClient(client)
    workloads = dynamic.resources.get(api_version="kueue.x-k8s.io/v1beta1", kind="Workload")
    assert (workloads.name, workloads.namespaced) == ("workloads", True)
    nodes = dynamic.resources.get(api_version="v1", kind="Node")
    nodes.create(body=node("n1"))
    assert [n.metadata.name for n in nodes.get().items] == ["n1"]
    # It asked for JSON only, so it got the legacy forms, not aggregated discovery.
    asked = server.requests_to("GET", "/apis")[0]
    assert "APIGroupDiscoveryList" not in asked.accept
    assert server.requests_to("GET", "/apis/kueue.x-k8s.io/v1beta1")
    client.close()


def test_json_patch_follows_rfc_6902_and_is_atomic():
    document = {"a": {"b": [1, 2]}, "c~d": 1}
    patched = json_patch(document, [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "move", "from": "/c~0d", "path": "/e"},
        {"op": "copy", "from": "/a/b", "path": "/f"},
        {"op": "replace", "path": "/a/b/1", "value": 9},
        {"op": "test", "path": "/e", "value": 1},
    ])
    assert patched == {"a": {"b": [0, 9, 2, 3]}, "e": 1, "f": [0, 1, 2, 3]}
    assert document == {"a": {"b": [1, 2]}, "c~d": 1}
    for bad in ([{"op": "replace", "path": "/missing", "value": 1}],
                [{"op": "add", "path": "/a/b/7", "value": 1}],
                [{"op": "jump", "path": "/a"}], [{"op": "add", "path": "/x"}]):
        with pytest.raises(PatchError):
            json_patch(document, bad)


def test_strategic_merge_directives():
    live = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "1"}],
                     "tolerations": [{"key": "x"}]},
            "metadata": {"finalizers": ["f1"], "labels": {"k": "v"}}}
    patched = strategic_merge_patch(live, {
        "spec": {"containers": [{"name": "b", "$patch": "delete"}], "tolerations": []},
        "metadata": {"finalizers": ["f2", "f1"], "labels": {"$patch": "replace", "n": "m"}}})
    assert patched == {"spec": {"containers": [{"name": "a", "image": "1"}], "tolerations": []},
                       "metadata": {"finalizers": ["f1", "f2"], "labels": {"n": "m"}}}
    with pytest.raises(PatchError, match="retainKeys"):
        strategic_merge_patch(live, {"spec": {"$retainKeys": ["containers"]}})
    with pytest.raises(PatchError, match="merge key: name"):
        strategic_merge_patch(live, {"spec": {"containers": [{"image": "2"}]}})
