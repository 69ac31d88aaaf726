"""The HTTP side of the Kubernetes API test double (kube_apiserver.py): discovery and OpenAPI
paths, resource paths and verbs, content types (JSON, YAML, protobuf in; JSON or a Table out),
field validation, dry runs, chunked watch and log streams."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

import yaml

from testing.doubles import kube_protobuf as protobuf
from testing.doubles import kube_schema as schema
from testing.doubles.kube_api import (
    PATH,
    SERVED,
    SUBRESOURCES,
    ApiError,
    Json,
    Key,
    bad_request,
    field_terms,
    fields_match,
    label_selected,
    validate,
)
from testing.doubles.kube_discovery import document
from testing.doubles.kube_openapi import document as openapi_document
from testing.doubles.kube_patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from testing.doubles.kube_table import asks_table, table

if TYPE_CHECKING:
    from testing.doubles.kube_apiserver import KubeApiServer

APPLY = "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"
PATCHES: dict[str, Callable[[Any, Any], Any]] = {
    "application/json-patch+json": json_patch,
    "application/merge-patch+json": merge_patch,
    STRATEGIC: strategic_merge_patch,
}


@dataclass(frozen=True)
class Request:
    """One request as received."""

    at: float  # time.time() on arrival
    method: str
    path: str  # without the query
    query: dict[str, str]  # first value of each parameter
    content_type: str
    raw: bytes
    accept: str = ""

    @cached_property
    def body(self) -> Any:
        """The body decoded (JSON, or YAML for apply); None when empty or undecodable."""
        try:
            return yaml.safe_load(self.raw) if self.raw else None
        except yaml.YAMLError:
            return None


@dataclass(frozen=True)
class Route:
    """Where a request goes: the object key ("" parts when absent), subresource, version."""

    key: Key
    query: dict[str, str]
    sub: str | None
    version: str


def make_handler(api: KubeApiServer) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"api": api})


def _not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def _no_resource() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def route(path: str, query: dict[str, str], method: str) -> Route:
    """The route of a path, or 404/405 as the server answers unknown paths and verbs."""
    match = PATH.match(path)
    if match is None:
        raise _no_resource()
    group, plural = "" if match["core"] else match["group"], match["plural"]
    resource = SERVED.get((group, plural))
    version = match["core"] or match["version"]
    if resource is None or version not in resource.versions:
        raise _no_resource()
    namespace, name, sub = match["ns"] or "", match["name"] or "", match["sub"]
    if namespace and not resource.namespaced:
        raise _no_resource()
    if sub and (group, plural, sub) not in SUBRESOURCES:
        raise _no_resource()
    if sub and SUBRESOURCES[(group, plural, sub)].method != method:
        raise _not_allowed()
    if name and resource.namespaced and not namespace:
        raise _no_resource()
    return Route((group, plural, namespace, name), query, sub, version)


def _decode(raw: bytes, expected: type, content_type: str = "application/json") -> Any:
    if content_type == protobuf.MEDIA_TYPE:
        try:
            return protobuf.decode(raw)
        except protobuf.ProtobufError as error:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an "
                           f"unknown format - the test double: {error}") from None
    try:
        body = json.loads(raw or b"null")
    except json.JSONDecodeError as error:
        raise bad_request(f"error decoding JSON: {error}") from None
    if not isinstance(body, expected):
        raise bad_request(f"the body must be a JSON {'object' if expected is dict else 'list'}")
    return body


def _dry(target: Route) -> bool:
    """`dryRun=All`: the server checks and answers the write but stores nothing."""
    value = target.query.get("dryRun")
    if value not in (None, "All"):
        raise bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    return value == "All"


def _patched(patcher: Callable[[Any, Any], Any], patch: Any) -> Callable[[Json], Json]:
    def change(old: Json) -> Json:
        try:
            new = patcher(old, patch)
        except PatchError as error:
            raise ApiError(422, "Invalid", str(error)) from None
        if not isinstance(new, dict):
            raise ApiError(422, "Invalid", "the patched object is not an object")
        return new
    return change


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiServer
    warnings: list[str]  # `Warning` headers of the answer being made
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; with Nagle's algorithm the second waits for the
    # client's delayed ACK (~40 ms a request on keep-alive connections).
    disable_nagle_algorithm = True

    def log_message(self, *_: object) -> None:
        """Quiet: tests read `requests`, not the access log."""

    # ---- plumbing --------------------------------------------------------------------------
    def _send(self, code: int, payload: Any, content_type: str = "application/json") -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        for warning in self.warnings:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
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

    def _handle(self) -> None:
        self.warnings = []
        url = urlparse(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip()
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        accept = self.headers.get("Accept", "")
        self.api.requests.append(
            Request(time.time(), self.command, url.path, query, content_type, raw, accept))
        try:
            if self.command == "GET" and self._discovery(url.path, accept):
                return
            target = route(url.path, query, self.command)
            getattr(self, f"_{self.command.lower()}")(target, raw, content_type)
        except ApiError as error:
            self._send(error.code, error.status())
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as error:  # a bug of the double: answered as the server's 500
            self._send(500, ApiError(500, "InternalError", repr(error)).status())

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

    def _discovery(self, path: str, accept: str) -> bool:
        """Answer a discovery or OpenAPI path; False when the path is not one."""
        openapi = openapi_document(path)
        if openapi is not None:
            self._send(200, openapi)
            return True
        found = document(path, accept, self.api.url.removeprefix("http://"))
        if found is not None:
            self._send(200, found[1], found[0])
        return found is not None

    # ---- verbs -----------------------------------------------------------------------------
    def _get(self, target: Route, raw: bytes, content_type: str) -> None:
        if target.sub == "log":
            return self._log(target)
        tabled = asks_table(self.headers.get("Accept", ""))
        if target.key[3]:
            obj = self.api.read(target.key)
            version = obj["metadata"]["resourceVersion"]
            return self._send(200, table([obj], version) if tabled else obj)
        if target.query.get("watch") in ("true", "1"):
            return self._watch(target, tabled)
        items, version = self.api.select(target.key, target.query.get("labelSelector"),
                                         target.query.get("fieldSelector"))
        if tabled:
            return self._send(200, table(items, str(version)))
        group = target.key[0]
        self._send(200, {"kind": f"{SERVED[target.key[:2]].kind}List",
                         "apiVersion": f"{group}/{target.version}" if group else target.version,
                         "metadata": {"resourceVersion": str(version)}, "items": items})

    def _post(self, target: Route, raw: bytes, content_type: str) -> None:
        if target.sub == "eviction":
            self.api.evict(target.key, _decode(raw, dict, content_type))
            return self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                    "status": "Success", "code": 201})
        if target.key[3] or (SERVED[target.key[:2]].namespaced and not target.key[2]):
            raise _not_allowed()
        body = self._checked(target, _decode(raw, dict, content_type), decoding=True)
        self._send(201, self.api.create(target.key, body, target.version,
                                        self._manager(target), _dry(target)))

    def _put(self, target: Route, raw: bytes, content_type: str) -> None:
        if not target.key[3] or target.sub:
            raise _not_allowed()
        body = self._checked(target, _decode(raw, dict, content_type), decoding=True)
        self._send(200, self.api.replace(target.key, body, target.version,
                                         self._manager(target), _dry(target)))

    def _patch(self, target: Route, raw: bytes, content_type: str) -> None:
        if not target.key[3]:
            raise _not_allowed()
        if content_type == APPLY:
            return self._apply(target, raw)
        patcher = PATCHES.get(content_type)
        builtin = SERVED[target.key[:2]].builtin
        if patcher is None or (content_type == STRATEGIC and not builtin):
            accepted = sorted({APPLY, *PATCHES} - (set() if builtin else {STRATEGIC}))
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           f"unknown format - accepted media types include: "
                           f"{', '.join(accepted)}")
        patch = _decode(raw, list if patcher is json_patch else dict)
        change = _patched(patcher, patch)
        self._send(200, self.api.patch(target.key, lambda old: self._checked(target, change(old)),
                                       self._manager(target), _dry(target)))

    def _apply(self, target: Route, raw: bytes) -> None:
        manager = target.query.get("fieldManager", "")
        if not manager:
            raise bad_request("PATCH, fieldManager: Required value: is required for apply patch")
        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise bad_request(f"error decoding YAML: {error}") from None
        if not isinstance(body, dict):
            raise bad_request("the body must be an object")
        validate(target.key, body, target.version)
        self._typed(target, body)
        force = target.query.get("force") == "true"
        obj, created = self.api.apply(target.key, body, manager, force, _dry(target))
        self._send(201 if created else 200, obj)

    def _delete(self, target: Route, raw: bytes, content_type: str) -> None:
        if not target.key[3]:
            raise _not_allowed()
        options = _decode(raw, dict) if raw.strip() else {}  # DeleteOptions, or the query's
        self.api.remove(target.key, _dry(target) or options.get("dryRun") == ["All"])
        group, plural, _, name = target.key
        self._send(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success",
                         "details": {"name": name, "group": group, "kind": plural}})

    # ---- field validation and ownership -----------------------------------------------------
    def _checked(self, target: Route, obj: Json, decoding: bool = False) -> Json:
        """The server's field validation (`fieldValidation`, Warn when absent) of a write."""
        group, plural = target.key[:2]
        unknown = schema.unknown_fields(group, target.version, SERVED[(group, plural)].kind, obj)
        if not unknown:
            return obj
        fields = ", ".join(f'unknown field "{schema.decoding_path(p)}"' for p in unknown)
        mode = target.query.get("fieldValidation", "Warn")
        if mode == "Strict":
            kind = SERVED[(group, plural)].kind
            prefix = f'{kind} in version "{target.version}" cannot be handled as a {kind}: '
            raise bad_request((prefix if decoding else "") + f"strict decoding error: {fields}")
        if mode == "Warn":
            self.warnings += [f'unknown field "{schema.decoding_path(p)}"' for p in unknown]
        schema.prune(obj, unknown)
        return obj

    def _typed(self, target: Route, body: Json) -> None:
        """An apply's fields must all be in the schema, whatever `fieldValidation` says."""
        group, plural, namespace, name = target.key
        kind = SERVED[(group, plural)].kind
        unknown = schema.unknown_fields(group, target.version, kind, body)
        if not unknown:
            return
        errors = [f"{schema.apply_path(p)}: field not declared in schema" for p in unknown]
        detail = errors[0] if len(errors) == 1 else "\n  ".join(["errors:", *errors])
        # A plain error on the server's side: 500 with no reason (kubernetes#118877).
        raise ApiError(500, "", f"failed to create typed patch object ({namespace}/{name}; "
                                f"{group}/{target.version}, Kind={kind}): {detail}")

    def _manager(self, target: Route) -> str:
        """The field manager of an update: named, or the User-Agent's product, as the server
        takes it."""
        named = target.query.get("fieldManager")
        return named or self.headers.get("User-Agent", "unknown").split("/")[0]

    # ---- streams ---------------------------------------------------------------------------
    def _watch(self, target: Route, tabled: bool) -> None:
        seen = int(target.query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(target.query.get("timeoutSeconds", "30"))
        labels = target.query.get("labelSelector")
        terms = field_terms(SERVED[target.key[:2]], target.query.get("fieldSelector"))
        self._start_stream("application/json")
        first = True
        while (left := deadline - time.monotonic()) > 0 and not self.api.closed:
            for change in self.api.wait_changes(seen, target.key[:2], min(left, 0.2)):
                seen, obj = change.version, change.object
                if (target.key[2] in ("", obj["metadata"].get("namespace", ""))
                        and label_selected(obj, labels) and fields_match(obj, terms)):
                    if tabled:  # column definitions in the first event only
                        obj, first = table([obj], str(seen), columns=first), False
                    self._chunk(json.dumps({"type": change.type, "object": obj}).encode() + b"\n")
        self._chunk(b"")

    def _log(self, target: Route) -> None:
        log_key, lines = self.api.pod_log(target.key, target.query.get("container"))
        sent = len(lines)
        tail = target.query.get("tailLines")
        if tail is not None:
            lines = lines[-int(tail):] if int(tail) else []
        if target.query.get("follow") != "true":
            return self._send(200, "".join(lines).encode(), "text/plain")
        self._start_stream("text/plain")
        for line in lines:
            self._chunk(line.encode())
        self._follow(log_key, sent)

    def _follow(self, log_key: tuple[str, str, str], sent: int) -> None:
        while True:
            new, finished = self.api.wait_log(log_key, sent, 0.2)
            sent += len(new)
            for line in new:
                self._chunk(line.encode())
            if finished and not new:
                break
        self._chunk(b"")
