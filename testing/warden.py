"""Faithful HTTP doubles of the services only Warden talks to, and its cluster's actors.

No Prometheus with DCGM exporters on GPUs, or Compute Engine, can run on these machines, so
each is an in-process HTTP server that speaks the subset of the real API Warden uses (same
paths, query, JSON shapes, status codes, Compute's requestId de-duplication); Warden's real
client (urllib) talks to them unchanged, and every request is kept in a call log. The
Kubernetes API is the shared double of testing/doubles/kube_apiserver.py; here are the objects
and controllers Warden's tests put in it (nodes, pods, the Job controller, KubeRay's RayClusters
and their pods, a reboot), and the chat webhook its drain notices go to.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from generator.catalog import Catalog
from generator.pods import node_checks
from runtime.identity import Annotation
from testing.doubles.kube_apiserver import KubeApiServer

Json = dict[str, Any]

# Check settings as the rendered ConfigMap carries them: the repository's accelerator catalog.
CHECKS = node_checks(Catalog(Path(__file__).resolve().parents[1])).model_dump(mode="json")


@dataclass
class Call:
    """One request seen by a double."""

    at: float
    method: str
    path: str
    body: Any


class _Server:
    """A threaded HTTP server whose handler dispatches to `route(method, path, query, body)`."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.lock = threading.RLock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                with owner.lock:
                    owner.calls.append(Call(time.time(), self.command, url.path, body))
                    status, answer = owner.route(self.command, url.path, query, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        raise NotImplementedError

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# The check Job outcome for (node, argv): passed, termination message, seconds to run.
JobPlan = Callable[[str, list[str]], tuple[bool, str, float]]


def is_stress(argv: list[str]) -> bool:
    """Whether a check Job's command runs the DCGM diagnostic (Warden's stress test)."""
    return "dcgmi diag" in " ".join(argv)


# What dcgmi prints without a host engine to connect to (DCGM 4.x; the user guide's
# troubleshooting of "Unable to connect to host engine").
NO_HOST_ENGINE = ("Error: unable to establish a connection to the specified host: localhost\n"
                  "Error: Unable to connect to host engine. Host engine connection "
                  "invalid/disconnected.")


def without_host_engine(argv: list[str]) -> bool:
    """Whether `dcgmi` runs before any `nv-hostengine` in the command (as a shell reads it)."""
    text = " ".join(argv)
    return "dcgmi" in text and not (0 <= text.find("nv-hostengine") < text.find("dcgmi"))


def passing(node: str, argv: list[str]) -> tuple[bool, str, float]:
    return True, '{"findings": []}', 0.0


def gpu_node(name: str, gpus: int = 8, **annotations: str) -> Json:
    """A ready GKE GPU node, as the kubelet registers it."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
            "annotations": dict(annotations)},
        "spec": {"providerID": f"gce://proj/us-central1-a/{name}"},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                   "nodeInfo": {"bootID": str(uuid.uuid4())},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def running_pod(namespace: str, name: str, node: str, owner: str = "Job",
                priority: str = "") -> Json:
    """A running pod on a node, owned by a controller of the given kind."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [
            {"apiVersion": "v1", "kind": owner, "name": name, "uid": name}]},
        "spec": {"nodeName": node, "priorityClassName": priority,
                 "containers": [{"name": "main", "image": "trainer"}]},
        "status": {"phase": "Running"},
    }


def raycluster(namespace: str, name: str, workers: int, rayjob: str = "") -> Json:
    """A RayCluster of one worker group, as KubeRay v1 stores it; made by `rayjob` when given
    (KubeRay labels such a cluster with its RayJob and makes the RayJob its controller)."""
    meta: Json = {"name": name, "namespace": namespace}
    if rayjob:
        meta["labels"] = {"ray.io/originated-from-crd": "RayJob",
                          "ray.io/originated-from-cr-name": rayjob}
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": rayjob,
                                    "uid": f"uid-{rayjob}", "controller": True,
                                    "blockOwnerDeletion": True}]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {}},
                     "workerGroupSpecs": [{"groupName": "workers", "replicas": workers,
                                           "minReplicas": 0, "maxReplicas": workers,
                                           "numOfHosts": 1, "template": {}}]}}


def rayjob(namespace: str, name: str, owner: str = "") -> Json:
    """A RayJob as the generator renders it (its owner annotation), KubeRay's status aside."""
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {Annotation.OWNER: owner} if owner else {}},
            "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True}}


def ray_pod(namespace: str, name: str, node: str, cluster: str, node_type: str = "worker",
            priority: str = "", owner: str = "") -> Json:
    """A running pod of a RayCluster, as KubeRay makes it: controlled by the RayCluster and
    labelled with it, its node type and group (ray-operator's utils/constant.go)."""
    group = "headgroup" if node_type == "head" else "workers"
    pod = running_pod(namespace, name, node, priority=priority)
    pod["metadata"]["labels"] = {"ray.io/cluster": cluster, "ray.io/node-type": node_type,
                                 "ray.io/group": group, "ray.io/is-ray-node": "yes"}
    pod["metadata"]["annotations"] = {Annotation.OWNER: owner} if owner else {}
    pod["metadata"]["ownerReferences"] = [{
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
        "uid": f"uid-{cluster}", "controller": True, "blockOwnerDeletion": True}]
    return pod


class KubeRay:
    """Plays KubeRay's RayCluster controller for the pods Warden evicts: a deleted pod of a
    RayCluster that still exists is replaced by a new pod of the same group, pending (no node:
    the scheduler would place it on a node that is not cordoned)."""

    def __init__(self, kube: KubeApiServer) -> None:
        self.kube = kube
        self.replaced: list[str] = []  # `namespace/name` of the pods it replaced
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        seen = 0
        while not self.kube.closed:
            for change in self.kube.wait_changes(seen, ("", "pods"), 0.05):
                seen = change.version
                if change.type == "DELETED":
                    self._replace(change.object)

    def _replace(self, pod: Json) -> None:
        meta = pod["metadata"]
        cluster = next((o["name"] for o in meta.get("ownerReferences") or []
                        if o.get("kind") == "RayCluster"), None)
        if cluster is None or self.kube.get("ray.io", "rayclusters", meta["namespace"],
                                            cluster) is None:
            return
        group = meta["labels"]["ray.io/group"]
        name = f"{cluster}-{group}-{uuid.uuid4().hex[:5]}"
        spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
        self.kube.put({**pod, "metadata": {k: v for k, v in meta.items()
                                           if k not in ("uid", "resourceVersion")} | {
                           "name": name}, "spec": spec, "status": {"phase": "Pending"}})
        self.replaced.append(f"{meta['namespace']}/{meta['name']}")


class ChatWebhook:
    """A Slack incoming webhook (https://api.slack.com/messaging/webhooks) on loopback: a POST
    of JSON with a non-empty `text` is answered 200 `ok`; another body 400 `invalid_payload`.
    `status` other than 200 makes it fail as Slack does when it cannot post (500
    `rollup_error`). Each POST is kept as (path, Content-Type, decoded body)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.posts: list[tuple[str, str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                kind = self.headers.get("Content-Type", "")
                owner.posts.append((self.path, kind, _json_or_none(raw)))
                code, text = owner.answer(kind, raw)
                self.send_response(code)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, content_type: str, raw: bytes) -> tuple[int, bytes]:
        body = _json_or_none(raw)
        if not content_type.startswith("application/json") or not isinstance(body, dict) \
                or not isinstance(body.get("text"), str) or not body["text"]:
            return 400, b"invalid_payload"
        return (200, b"ok") if self.status == 200 else (self.status, b"rollup_error")

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def reboot(kube: KubeApiServer, name: str) -> None:
    """What a reset does to the node object: a new boot id once the kubelet is back."""
    node = kube.get("", "nodes", "", name)
    if node is not None:
        node["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())
        kube.put(node)


class CheckJobs:
    """Plays the Job controller and the kubelet for Warden's check Jobs (no cluster runs here).

    A Job created through the API becomes active, then ends `plan(node, argv)` seconds later:
    its status (Complete, or Failed with BackoffLimitExceeded) and its pod, labelled
    `job-name`, whose container terminated with the plan's message. A command the real
    container could not run fails as it would: `dcgmi` with no host engine started.
    """

    def __init__(self, kube: KubeApiServer, plan: JobPlan = passing) -> None:
        self.kube, self.plan = kube, plan
        self._due: list[tuple[float, str, str, bool, str]] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        seen = 0
        while not self.kube.closed:
            for change in self.kube.wait_changes(seen, ("batch", "jobs"), 0.05):
                seen = change.version
                if change.type == "ADDED":
                    self._start(change.object)
            now = time.time()
            for due in [d for d in self._due if d[0] <= now]:
                self._due.remove(due)
                self._finish(*due[1:])

    def _start(self, job: Json) -> None:
        pod = job["spec"]["template"]["spec"]
        node = pod["nodeSelector"]["kubernetes.io/hostname"]
        argv = pod["containers"][0]["command"]
        passed, message, seconds = (False, NO_HOST_ENGINE, 0.0) if without_host_engine(argv) \
            else self.plan(node, argv)
        meta = job["metadata"]
        self.kube.put({**job, "status": {"active": 1}})
        self._due.append((time.time() + seconds, meta["namespace"], meta["name"], passed,
                          message))

    def _finish(self, namespace: str, name: str, passed: bool, message: str) -> None:
        job = self.kube.get("batch", "jobs", namespace, name)
        if job is None:
            return
        job["status"] = {"succeeded": 1, "conditions": [
            {"type": "Complete", "status": "True"}]} if passed else {
            "failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                         "reason": "BackoffLimitExceeded"}]}
        self.kube.put(job)
        self.kube.put(_check_pod(job, passed, message))


def _check_pod(job: Json, passed: bool, message: str) -> Json:
    name = job["metadata"]["name"]
    spec = job["spec"]["template"]["spec"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{name}-0", "namespace": job["metadata"]["namespace"],
                     "labels": {"job-name": name, "batch.kubernetes.io/job-name": name},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": name, "uid": job["metadata"]["uid"],
                                          "controller": True}]},
        "spec": {**spec, "nodeName": spec["nodeSelector"]["kubernetes.io/hostname"]},
        "status": {"phase": "Succeeded" if passed else "Failed", "containerStatuses": [
            {"name": "check", "state": {"terminated": {
                "exitCode": 0 if passed else 1, "message": message}}}]},
    }


@dataclass
class RecordedEvents:
    """Warden's EventLog keeping what it recorded, as (node, action, reason, message): the
    real ones write a store or a log a test cannot read back as easily."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)

    def record(self, node: str, action: str, reason: str, message: str) -> None:
        self.rows.append((node, action, reason, message))


@dataclass
class FakePrometheus(_Server):
    """Prometheus' instant-query API over DCGM exporter series (one series per GPU)."""

    # metric -> (node, gpu) -> (labels, value): one series per GPU, replaced in O(1), so a
    # fleet of thousands of GPUs (benchmarks/fleet/warden.py) is as quick to update as one.
    series: dict[str, dict[tuple[str, str], tuple[Json, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _Server.__init__(self)

    def set(self, metric: str, node: str, gpu: int, value: float) -> None:
        with self.lock:
            labels = {"Hostname": node, "gpu": str(gpu)}
            self.series.setdefault(metric, {})[(node, str(gpu))] = (labels, value)

    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        match = re.fullmatch(r"max by \((\w+)\) \((\w+)\)", query.get("query", ""))
        if path != "/api/v1/query" or match is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": "unsupported"}
        label, metric = match.groups()
        best: dict[str, float] = {}
        for labels, value in self.series.get(metric, {}).values():
            best[labels[label]] = max(value, best.get(labels[label], value))
        result = [{"metric": {label: k}, "value": [time.time(), str(v)]} for k, v in best.items()]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


@dataclass
class FakeGcp(_Server):
    """The GCE metadata token endpoint and Compute's instances.reset / reportHostAsFaulty.

    Like Compute Engine, a repeated requestId is answered with the first operation and not
    executed again. An executed reset (or repair) reboots the node in the Kubernetes double,
    then calls `after_reset(instance)`, where a test clears what it cured (the fault signals).
    """

    kube: KubeApiServer | None = None
    after_reset: Callable[[str], None] | None = None
    executed: list[tuple[str, str]] = field(default_factory=list)
    seen: dict[str, Json] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _Server.__init__(self)

    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if path.endswith("/service-accounts/default/token"):
            return 200, {"access_token": "token", "expires_in": 3600, "token_type": "Bearer"}
        match = re.fullmatch(r"/projects/[^/]+/zones/[^/]+/instances/([^/]+)/(\w+)", path)
        if method != "POST" or match is None:
            return 404, {"error": {"code": 404, "message": path}}
        request_id = query.get("requestId", str(uuid.uuid4()))
        if request_id not in self.seen:
            instance, verb = match.groups()
            self.executed.append((verb, instance))
            if self.kube is not None:
                reboot(self.kube, instance)
            if self.after_reset is not None:
                self.after_reset(instance)
            self.seen[request_id] = {"kind": "compute#operation", "name": request_id,
                                     "operationType": verb, "status": "DONE"}
        return 200, self.seen[request_id]

    def executions(self, verb: str) -> list[str]:
        with self.lock:
            return [instance for v, instance in self.executed if v == verb]
