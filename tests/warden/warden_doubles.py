"""Faithful HTTP doubles of the services Warden talks to, for tests only.

No Kubernetes API server, Prometheus with DCGM exporters on GPUs, or Compute Engine can run
on these machines, so each is an in-process HTTP server that speaks the subset of the real
API Warden uses (same paths, query selectors, JSON shapes, status codes, merge-patch and
resourceVersion semantics, Compute's requestId de-duplication). Warden's real clients
(`kubernetes`, urllib) talk to them unchanged. Every request is kept in a call log.
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
from typing import Any
from urllib.parse import parse_qs, urlparse

Json = dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


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


def _status(code: int, reason: str, message: str) -> tuple[int, Json]:
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "reason": reason, "message": message, "code": code}


def _selected(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


# The check Job outcome for (node, argv): passed, termination message, seconds to run.
JobPlan = Callable[[str, list[str]], tuple[bool, str, float]]


@dataclass
class FakeKube(_Server):
    """The Kubernetes API subset Warden uses: nodes, pods, evictions, events, Jobs, RayClusters."""

    nodes: dict[str, Json] = field(default_factory=dict)
    pods: dict[str, Json] = field(default_factory=dict)
    events: list[Json] = field(default_factory=list)
    jobs: dict[str, Json] = field(default_factory=dict)
    rayclusters: dict[str, Json] = field(default_factory=dict)
    job_plan: JobPlan = lambda node, argv: (True, '{"findings": []}', 0.0)

    def __post_init__(self) -> None:
        _Server.__init__(self)
        self._version = 1

    # --- fixtures a test arranges -----------------------------------------------------
    def add_node(self, name: str, gpus: int = 8, **annotations: str) -> None:
        with self.lock:
            self.nodes[name] = {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name,
                    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "annotations": dict(annotations), "resourceVersion": self._bump()},
                "spec": {"providerID": f"gce://proj/us-central1-a/{name}"},
                "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                           "nodeInfo": {"bootID": str(uuid.uuid4())},
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }

    def add_pod(self, namespace: str, name: str, node: str, owner: str = "Job",
                priority: str = "") -> None:
        with self.lock:
            self.pods[f"{namespace}/{name}"] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": [
                    {"apiVersion": "v1", "kind": owner, "name": name, "uid": name}]},
                "spec": {"nodeName": node, "priorityClassName": priority},
                "status": {"phase": "Running"},
            }

    def reboot(self, name: str) -> None:
        """What a reset does to the node object: a new boot id once the kubelet is back."""
        with self.lock:
            self.nodes[name]["status"]["nodeInfo"]["bootID"] = str(uuid.uuid4())

    def patches(self, node: str) -> list[Call]:
        with self.lock:
            return [c for c in self.calls
                    if c.method == "PATCH" and c.path == f"/api/v1/nodes/{node}"]

    def _bump(self) -> str:
        self._version += 1
        return str(self._version)

    # --- the API ------------------------------------------------------------------------
    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        for pattern, handler in self._routes():
            match = re.fullmatch(pattern, f"{method} {path}")
            if match:
                return handler(query, body, *match.groups())
        return _status(404, "NotFound", f"{method} {path}")

    def _routes(self) -> list[tuple[str, Callable[..., tuple[int, Any]]]]:
        ns = r"/api/v1/namespaces/([^/]+)"
        jobs = r"/apis/batch/v1/namespaces/([^/]+)/jobs"
        ray = r"/apis/ray.io/v1/namespaces/([^/]+)/rayclusters/([^/]+)"
        return [
            (r"GET /api/v1/nodes", self._list_nodes),
            (r"GET /api/v1/nodes/([^/]+)", self._get_node),
            (r"PATCH /api/v1/nodes/([^/]+)", self._patch_node),
            (r"GET /api/v1/pods", self._list_pods),
            (rf"GET {ns}/pods", self._list_pods),
            (rf"POST {ns}/pods/([^/]+)/eviction", self._evict),
            (r"GET /api/v1/events", self._list_events),
            (rf"POST {ns}/events", self._post_event),
            (rf"POST {jobs}", self._create_job),
            (rf"GET {jobs}/([^/]+)", self._get_job),
            (rf"GET {ray}", self._get_ray),
            (rf"PATCH {ray}", self._patch_ray),
        ]

    def _list_nodes(self, query: Json, body: Any) -> tuple[int, Any]:
        selector = query.get("labelSelector", "")
        items = [n for n in self.nodes.values() if _selected(n["metadata"]["labels"], selector)]
        return 200, {"kind": "NodeList", "apiVersion": "v1", "items": items}

    def _get_node(self, query: Json, body: Any, name: str) -> tuple[int, Any]:
        if name not in self.nodes:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        return 200, self.nodes[name]

    def _patch_node(self, query: Json, body: Any, name: str) -> tuple[int, Any]:
        if name not in self.nodes:
            return _status(404, "NotFound", f'nodes "{name}" not found')
        node = merge_patch(self.nodes[name], body)
        node["metadata"]["resourceVersion"] = self._bump()
        self.nodes[name] = node
        return 200, node

    def _list_pods(self, query: Json, body: Any, namespace: str | None = None) -> tuple[int, Any]:
        items = [p for p in self.pods.values()
                 if namespace is None or p["metadata"]["namespace"] == namespace]
        field_sel = query.get("fieldSelector", "")
        if field_sel.startswith("spec.nodeName="):
            node = field_sel.split("=", 1)[1]
            items = [p for p in items if p["spec"].get("nodeName") == node]
        labels = query.get("labelSelector", "")
        items = [p for p in items if _selected(p["metadata"].get("labels", {}), labels)]
        return 200, {"kind": "PodList", "apiVersion": "v1", "items": items}

    def _evict(self, query: Json, body: Any, namespace: str, name: str) -> tuple[int, Any]:
        if self.pods.pop(f"{namespace}/{name}", None) is None:
            return _status(404, "NotFound", f'pods "{name}" not found')
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _list_events(self, query: Json, body: Any) -> tuple[int, Any]:
        wanted = dict(t.split("=", 1) for t in query.get("fieldSelector", "").split(",") if t)
        items = [e for e in self.events if all(
            e.get("involvedObject", {}).get(k.split(".", 1)[1]) == v for k, v in wanted.items())]
        return 200, {"kind": "EventList", "apiVersion": "v1", "items": items}

    def _post_event(self, query: Json, body: Any, namespace: str) -> tuple[int, Any]:
        self.events.append(body)
        return 201, body

    def _create_job(self, query: Json, body: Any, namespace: str) -> tuple[int, Any]:
        key = f"{namespace}/{body['metadata']['name']}"
        if key in self.jobs:
            return _status(409, "AlreadyExists", f'jobs.batch "{key}" already exists')
        pod = body["spec"]["template"]["spec"]
        node = pod["nodeSelector"]["kubernetes.io/hostname"]
        passed, message, seconds = self.job_plan(node, pod["containers"][0]["command"])
        job = merge_patch(body, {"status": {"active": 1}})
        job["_plan"] = {"done_at": time.time() + seconds, "passed": passed, "message": message}
        self.jobs[key] = job
        return 201, job

    def _get_job(self, query: Json, body: Any, namespace: str, name: str) -> tuple[int, Any]:
        job = self.jobs.get(f"{namespace}/{name}")
        if job is None:
            return _status(404, "NotFound", f'jobs.batch "{name}" not found')
        plan = job["_plan"]
        if time.time() >= plan["done_at"] and "succeeded" not in job["status"]:
            self._finish_job(namespace, name, job, plan)
        return 200, {k: v for k, v in job.items() if k != "_plan"}

    def _finish_job(self, namespace: str, name: str, job: Json, plan: Json) -> None:
        """What the Job controller and kubelet leave behind when the check pod exits."""
        passed = plan["passed"]
        job["status"] = {"succeeded": 1} if passed else {
            "failed": 1, "conditions": [{"type": "Failed", "status": "True",
                                         "reason": "BackoffLimitExceeded"}]}
        job["status"]["succeeded"] = 1 if passed else 0
        self.pods[f"{namespace}/{name}-0"] = {
            "metadata": {"name": f"{name}-0", "namespace": namespace,
                         "labels": {"job-name": name}},
            "spec": {"nodeName": job["spec"]["template"]["spec"]["nodeSelector"][
                "kubernetes.io/hostname"]},
            "status": {"phase": "Succeeded" if passed else "Failed", "containerStatuses": [
                {"name": "check", "state": {"terminated": {
                    "exitCode": 0 if passed else 1, "message": plan["message"]}}}]},
        }

    def _get_ray(self, query: Json, body: Any, namespace: str, name: str) -> tuple[int, Any]:
        cluster = self.rayclusters.get(f"{namespace}/{name}")
        if cluster is None:
            return _status(404, "NotFound", f'rayclusters.ray.io "{name}" not found')
        return 200, cluster

    def _patch_ray(self, query: Json, body: Any, namespace: str, name: str) -> tuple[int, Any]:
        key = f"{namespace}/{name}"
        current = self.rayclusters.get(key)
        if current is None:
            return _status(404, "NotFound", f'rayclusters.ray.io "{name}" not found')
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified")
        updated = merge_patch(current, body)
        updated["metadata"]["resourceVersion"] = self._bump()
        self.rayclusters[key] = updated
        return 200, updated


@dataclass
class FakePrometheus(_Server):
    """Prometheus' instant-query API over DCGM exporter series (one series per GPU)."""

    series: dict[str, list[tuple[Json, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _Server.__init__(self)

    def set(self, metric: str, node: str, gpu: int, value: float) -> None:
        with self.lock:
            rows = [r for r in self.series.get(metric, [])
                    if (r[0]["Hostname"], r[0]["gpu"]) != (node, str(gpu))]
            rows.append(({"Hostname": node, "gpu": str(gpu)}, value))
            self.series[metric] = rows

    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        match = re.fullmatch(r"max by \((\w+)\) \((\w+)\)", query.get("query", ""))
        if path != "/api/v1/query" or match is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": "unsupported"}
        label, metric = match.groups()
        best: dict[str, float] = {}
        for labels, value in self.series.get(metric, []):
            best[labels[label]] = max(value, best.get(labels[label], value))
        result = [{"metric": {label: k}, "value": [time.time(), str(v)]} for k, v in best.items()]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


@dataclass
class FakeGcp(_Server):
    """The GCE metadata token endpoint and Compute's instances.reset / reportHostAsFaulty.

    Like Compute Engine, a repeated requestId is answered with the first operation and not
    executed again. An executed reset reboots the node in the Kubernetes double.
    """

    kube: FakeKube | None = None
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
                self.kube.reboot(instance)
            self.seen[request_id] = {"kind": "compute#operation", "name": request_id,
                                     "operationType": verb, "status": "DONE"}
        return 200, self.seen[request_id]

    def executions(self, verb: str) -> list[str]:
        with self.lock:
            return [instance for v, instance in self.executed if v == verb]
