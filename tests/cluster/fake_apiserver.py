"""A TEST DOUBLE of the Kubernetes API server: no real API server can run on these machines.

It is a real HTTP server on loopback that speaks the subset of the API that `gkr` uses, as the
real one does (Kubernetes API concepts: https://kubernetes.io/docs/reference/using-api/):

* namespaced create (POST), get, list (labelSelector), merge patch, delete of the served
  kinds, and get of nodes; resourceVersion, uid, creationTimestamp and generation are kept;
* server-side apply: PATCH with `application/apply-patch+yaml`, `fieldManager` required
  (400 otherwise), managedFields per manager, 409 Conflict when another manager owns a field
  with a different value unless `force=true`;
* watch (`?watch=true`): chunked stream of ADDED/MODIFIED/DELETED events after a resourceVersion,
  closed after `timeoutSeconds`;
* pod logs (`/log`, `container`, `follow`, `tailLines`): text/plain, streamed while following;
* failures as `Status` objects with the real codes and reasons: 404 NotFound, 409 AlreadyExists
  and Conflict, 422 Invalid, 400 BadRequest, 415 UnsupportedMediaType.

Tests play the controllers: they add pods, events and Kueue workloads with `put`.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

# (group, plural) -> (kind, namespaced); the versions are taken from the request path.
SERVED: dict[tuple[str, str], tuple[str, bool]] = {
    ("", "pods"): ("Pod", True),
    ("", "events"): ("Event", True),
    ("", "nodes"): ("Node", False),
    ("apps", "deployments"): ("Deployment", True),
    ("batch", "jobs"): ("Job", True),
    ("ray.io", "rayjobs"): ("RayJob", True),
    ("ray.io", "rayclusters"): ("RayCluster", True),
    ("kueue.x-k8s.io", "workloads"): ("Workload", True),
}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>log))?$"
)


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.details = code, reason, details or {}

    def status(self) -> dict[str, Any]:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": str(self), "reason": self.reason, "details": self.details,
                "code": self.code}


@dataclass
class _Store:
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    owners: dict[tuple[str, str, str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    history: list[tuple[int, str, tuple[str, str], dict[str, Any]]] = field(default_factory=list)
    logs: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    open_logs: set[tuple[str, str, str]] = field(default_factory=set)
    version: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)
    requests: list[tuple[str, str, str]] = field(default_factory=list)


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Field paths of an applied object (lists are atomic, as in most Kubernetes list types)."""
    if isinstance(value, dict) and value:
        found: dict[str, Any] = {}
        for key, item in value.items():
            found |= _leaves(item, f"{prefix}.{key}")
        return found
    return {prefix: value}


def _merge(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


def _selected(obj: dict[str, Any], selector: str | None) -> bool:
    """Equality-based label selectors (`a=b,c!=d`) and existence (`a`)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class FakeApiServer:
    """The test double; use as a context manager; `url` is its address."""

    def __init__(self) -> None:
        self.store = _Store()
        handler = type("Handler", (_Handler,), {"api": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        with self.store.changed:
            self.store.open_logs.clear()
            self.store.changed.notify_all()
        self.http.shutdown()
        self.http.server_close()

    # ---- what the tests (playing controllers) do -------------------------------------------
    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object as a controller would."""
        group = obj["apiVersion"].rpartition("/")[0]
        plural = next(p for (g, p), (k, _) in SERVED.items() if g == group and k == obj["kind"])
        meta = obj["metadata"]
        key = (group, plural, meta.get("namespace", ""), meta["name"])
        with self.store.changed:
            old = self.store.objects.get(key)
            return self._save(key, obj, old, "MODIFIED" if old else "ADDED")

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.objects.get((group, plural, namespace, name))

    def set_log(self, namespace: str, pod: str, container: str, text: str, follow: bool = False):
        with self.store.changed:
            self.store.logs[(namespace, pod, container)] = text.splitlines(keepends=True)
            if follow:
                self.store.open_logs.add((namespace, pod, container))
            self.store.changed.notify_all()

    def append_log(self, namespace: str, pod: str, container: str, text: str, end: bool = False):
        with self.store.changed:
            self.store.logs[(namespace, pod, container)] += text.splitlines(keepends=True)
            if end:
                self.store.open_logs.discard((namespace, pod, container))
            self.store.changed.notify_all()

    # ---- storage ---------------------------------------------------------------------------
    def _save(self, key: tuple[str, str, str, str], obj: dict[str, Any],
              old: dict[str, Any] | None, event: str) -> dict[str, Any]:
        """Store under the lock with fresh metadata; record the watch event."""
        store = self.store
        store.version += 1
        meta = obj.setdefault("metadata", {})
        previous = (old or {}).get("metadata", {})
        meta["uid"] = previous.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = previous.get("creationTimestamp") or datetime.now(
            UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta["resourceVersion"] = str(store.version)
        spec_changed = old is None or old.get("spec") != obj.get("spec")
        meta["generation"] = previous.get("generation", 0) + (1 if spec_changed else 0)
        store.objects[key] = obj
        store.history.append((store.version, event, key[:2], json.loads(json.dumps(obj))))
        store.changed.notify_all()
        return obj

    def delete(self, key: tuple[str, str, str, str]) -> dict[str, Any]:
        with self.store.changed:
            obj = self.store.objects.pop(key, None)
            if obj is None:
                raise _not_found(key)
            self.store.owners.pop(key, None)
            self.store.version += 1
            self.store.history.append((self.store.version, "DELETED", key[:2], obj))
            self.store.changed.notify_all()
            return obj

    def apply(self, key: tuple[str, str, str, str], body: dict[str, Any], manager: str,
              force: bool) -> tuple[dict[str, Any], bool]:
        """Server-side apply: (object, created)."""
        with self.store.changed:
            old = self.store.objects.get(key)
            owners = self.store.owners.setdefault(key, {})
            applied = _leaves({k: v for k, v in body.items() if k != "status"})
            conflicts = sorted(
                f"{path} (owned by {other!r})" for other, fields in owners.items()
                if other != manager for path, value in applied.items()
                if path in fields and fields[path] != value
            )
            if conflicts and not force:
                raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflicts: "
                               + "; ".join(conflicts), {"name": key[3], "kind": key[1]})
            for other in owners:
                if other != manager:
                    owners[other] = {p: v for p, v in owners[other].items() if p not in applied}
            owners[manager] = applied
            merged = _merge(old or {}, body)
            merged["metadata"]["managedFields"] = [
                {"manager": m, "operation": "Apply", "fieldsType": "FieldsV1"} for m in owners
            ]
            return self._save(key, merged, old, "MODIFIED" if old else "ADDED"), old is None


def _not_found(key: tuple[str, ...]) -> ApiError:
    group, plural, _, name = key
    resource = f"{plural}.{group}" if group else plural
    return ApiError(404, "NotFound", f'{resource} "{name}" not found',
                    {"name": name, "group": group, "kind": plural})


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        """Quiet: tests read the store, not the access log."""

    # ---- plumbing --------------------------------------------------------------------------
    def _route(self) -> tuple[tuple[str, str, str, str], dict[str, list[str]], str | None, str]:
        url = urlparse(self.path)
        match = PATH.match(url.path)
        if not match:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        group = "" if match["core"] else match["group"]
        plural = match["plural"]
        if (group, plural) not in SERVED:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        version = match["core"] or match["version"]
        key = (group, plural, match["ns"] or "", match["name"] or "")
        return key, parse_qs(url.query), match["sub"], version

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _handle(self, method: str) -> None:
        self.api.store.requests.append((method, self.path, self.headers.get("Content-Type", "")))
        try:
            key, query, sub, version = self._route()
            getattr(self, f"_{method.lower()}")(key, query, sub, version)
        except ApiError as error:
            self._send(error.code, error.status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # ---- verbs -----------------------------------------------------------------------------
    def _get(self, key, query, sub, version) -> None:
        if sub == "log":
            return self._log(key, query)
        if key[3]:
            obj = self.api.store.objects.get(key)
            if obj is None:
                raise _not_found(key)
            return self._send(200, obj)
        if query.get("watch", ["false"])[0] in ("true", "1"):
            return self._watch(key, query)
        selector = query.get("labelSelector", [None])[0]
        items = [obj for (g, p, ns, _), obj in sorted(self.api.store.objects.items())
                 if (g, p) == key[:2] and ns == key[2] and _selected(obj, selector)]
        kind = SERVED[key[:2]][0]
        api_version = f"{key[0]}/{version}" if key[0] else version
        self._send(200, {"kind": f"{kind}List", "apiVersion": api_version, "items": items,
                         "metadata": {"resourceVersion": str(self.api.store.version)}})

    def _post(self, key, query, sub, version) -> None:
        body = self._json(self._body())
        name = body.get("metadata", {}).get("name", "")
        full = (*key[:3], name)
        self._validate(full, body, version)
        with self.api.store.changed:
            if full in self.api.store.objects:
                resource = f"{key[1]}.{key[0]}" if key[0] else key[1]
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists',
                               {"name": name, "group": key[0], "kind": key[1]})
            body["metadata"]["namespace"] = key[2]
            self._send(201, self.api._save(full, body, None, "ADDED"))

    def _patch(self, key, query, sub, version) -> None:
        content_type = self.headers.get("Content-Type", "").split(";")[0]
        raw = self._body()
        if content_type == "application/apply-patch+yaml":
            return self._apply(key, query, raw, version)
        if content_type != "application/merge-patch+json":
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - {content_type}")
        with self.api.store.changed:
            old = self.api.store.objects.get(key)
            if old is None:
                raise _not_found(key)
            merged = _merge(json.loads(json.dumps(old)), self._json(raw))
            self._send(200, self.api._save(key, merged, old, "MODIFIED"))

    def _apply(self, key, query, raw: bytes, version: str) -> None:
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            raise ApiError(400, "BadRequest",
                           "PATCH, fieldManager: Required value: is required for apply patch")
        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ApiError(400, "BadRequest", f"error decoding YAML: {error}") from None
        self._validate(key, body, version)
        body["metadata"]["namespace"] = key[2]
        force = query.get("force", ["false"])[0] == "true"
        obj, created = self.api.apply(key, body, manager, force)
        self._send(201 if created else 200, obj)

    def _delete(self, key, query, sub, version) -> None:
        self.api.delete(key)
        self._send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success", "details": {"name": key[3], "group": key[0],
                                                          "kind": key[1]}})

    # ---- validation, watch, logs -----------------------------------------------------------
    @staticmethod
    def _json(raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError as error:
            raise ApiError(400, "BadRequest", f"error decoding JSON: {error}") from None
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        return body

    @staticmethod
    def _validate(key: tuple[str, str, str, str], body: dict[str, Any], version: str) -> None:
        kind = SERVED[key[:2]][0]
        expected = f"{key[0]}/{version}" if key[0] else version
        if body.get("kind") != kind or body.get("apiVersion") != expected:
            raise ApiError(400, "BadRequest", f"the API version in the data "
                           f"({body.get('apiVersion')}) does not match the expected API version "
                           f"({expected}) or kind ({kind})")
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        causes = []
        if not name:
            causes.append("metadata.name: Required value: name or generateName is required")
        elif not DNS_SUBDOMAIN.match(name) or len(name) > 253:
            causes.append(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
                          "subdomain must consist of lower case alphanumeric characters, '-' "
                          "or '.'")
        if key[3] and name and name != key[3]:
            causes.append(f'metadata.name: Invalid value: "{name}": the name of the object '
                          f'({name}) does not match the name on the URL ({key[3]})')
        if meta.get("namespace") not in (None, key[2]):
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not "
                           "match the namespace sent on the request")
        if causes:
            raise ApiError(422, "Invalid", f'{kind}.{key[0] or "core"} "{name}" is invalid: '
                           + ", ".join(causes), {"name": name, "kind": kind,
                                                 "causes": [{"message": c} for c in causes]})

    def _watch(self, key, query) -> None:
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        selector = query.get("labelSelector", [None])[0]
        deadline, seen = time.monotonic() + timeout, since
        self._start_stream("application/json")
        store = self.api.store
        while time.monotonic() < deadline:
            with store.changed:
                events = [e for e in store.history if e[0] > seen and e[2] == key[:2]]
                if not events:
                    store.changed.wait(min(0.2, max(deadline - time.monotonic(), 0)))
                    continue
            for version, kind, _, obj in events:
                seen = version
                if obj["metadata"].get("namespace", "") == key[2] and _selected(obj, selector):
                    self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
        self._chunk(b"")

    def _log(self, key, query) -> None:
        store = self.api.store
        if key[:2] != ("", "pods") or key not in store.objects:
            raise _not_found(key)
        containers = [c["name"] for c in store.objects[key]["spec"]["containers"]]
        container = query.get("container", [None])[0]
        if container is None and len(containers) > 1:
            raise ApiError(400, "BadRequest", f"a container name must be specified for pod "
                           f"{key[3]}, choose one of: [{' '.join(containers)}]")
        log_key = (key[2], key[3], container or containers[0])
        lines = list(store.logs.get(log_key, []))
        tail = query.get("tailLines", [None])[0]
        if tail is not None:
            lines = lines[-int(tail):] if int(tail) else []
        if query.get("follow", ["false"])[0] != "true":
            return self._send(200, "".join(lines).encode(), "text/plain")
        self._follow(log_key, lines)

    def _follow(self, log_key: tuple[str, str, str], lines: list[str]) -> None:
        store = self.api.store
        sent = len(store.logs.get(log_key, []))
        self._start_stream("text/plain")
        for line in lines:
            self._chunk(line.encode())
        while True:
            with store.changed:
                while len(store.logs.get(log_key, [])) == sent and log_key in store.open_logs:
                    store.changed.wait(0.2)
                new = store.logs.get(log_key, [])[sent:]
                sent += len(new)
                finished = log_key not in store.open_logs
            for line in new:
                self._chunk(line.encode())
            if finished and not new:
                break
        self._chunk(b"")
