"""The OpenAPI v3 documents of the Kubernetes API test double, as a v1.37 server publishes them.

`/openapi/v3` is the index: one `serverRelativeURL` (with a `hash`) per group version.
`/openapi/v3/api/v1` and `/openapi/v3/apis/<group>/<version>` are each an OpenAPI 3.0 document
with the paths and operations of that group version's served resources and, in
`components.schemas`, the schemas those need (kube_schema.py). Every operation carries
`x-kubernetes-action` and `x-kubernetes-group-version-kind`, and PATCH, POST and PUT list the
`fieldValidation` parameter: kubectl reads these to learn that the server validates fields
itself (k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go), and then sends
`fieldValidation=Strict` instead of validating on the client.

Not served: `/openapi/v2` (kubectl asks for it only in protobuf, and only when v3 is missing),
`deletecollection` and watch paths, the status subresource's paths.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache

from testing.doubles.kube_api import SERVED, SUBRESOURCES, Json, Resource, Subresource
from testing.doubles.kube_discovery import group_versions, groups
from testing.doubles.kube_schema import REF, definitions, references, schema_name

_GROUP_VERSION = re.compile(
    r"^/openapi/v3/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<v>[^/]+))$")
STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
PATCH = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
DELETE_OPTIONS = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
PATCH_TYPES = ("application/apply-patch+yaml", "application/json-patch+json",
               "application/merge-patch+json", "application/strategic-merge-patch+json")


def document(path: str) -> bytes | None:
    """The JSON body the server answers an OpenAPI v3 path with; None when not one."""
    path = path.rstrip("/")
    if path == "/openapi/v3":
        return _encoded("", "")
    match = _GROUP_VERSION.match(path)
    if match is None:
        return None
    group, version = ("", "v1") if match["core"] else (match["group"], match["v"])
    if group and (group not in groups() or version not in group_versions(group)):
        return None
    return _encoded(group, version)


@cache
def _encoded(group: str, version: str) -> bytes:
    """Built once: the schemas of a group version take a while to gather."""
    if not version:
        return json.dumps(index()).encode()
    return json.dumps(group_version_document(group, version)).encode()


def _prefix(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def index() -> Json:
    """The index: each group version's document, addressed by the hash of its content."""
    found = [("", "v1")] + [(g, v) for g in groups() for v in group_versions(g)]
    return {"paths": {
        _prefix(g, v): {"serverRelativeURL": f"/openapi/v3/{_prefix(g, v)}?hash="
                        + hashlib.sha512(_encoded(g, v)).hexdigest().upper()}
        for g, v in found}}


def group_version_document(group: str, version: str) -> Json:
    """One group version's paths, and the schemas they reach."""
    paths: Json = {}
    roots = {STATUS, PATCH, DELETE_OPTIONS}
    for (g, plural), resource in SERVED.items():
        if g == group and version in resource.versions:
            kind = schema_name(group, version, resource.kind)
            roots.add(kind)
            paths |= _Operations(group, version, plural, resource, kind).paths()
            for (sg, sp, sub), info in SUBRESOURCES.items():
                if (sg, sp) == (group, plural):
                    sub_kind = schema_name(info.group, info.version, info.kind)
                    roots.add(sub_kind)
                    paths |= _subresource_path(group, version, plural, sub, info, sub_kind)
    names = {name for root in roots for name in references(root)}
    schemas = {name: definitions()[name] for name in sorted(names)}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"},
            "paths": paths, "components": {"schemas": schemas}}


# ---- paths and operations ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Operations:
    """The paths and operations of one resource in one version."""

    group: str
    version: str
    plural: str
    resource: Resource
    kind: str  # the name of the kind's schema

    def paths(self) -> Json:
        base = "/" + _prefix(self.group, self.version)
        namespaced = self.resource.namespaced
        scoped = f"{base}/namespaces/{{namespace}}/{self.plural}" if namespaced else \
            f"{base}/{self.plural}"
        scope = [_path_param("namespace")] if namespaced else []
        paths = {
            scoped: {"get": self.make("list", "list"), "post": self.make("create", "post"),
                     "parameters": scope},
            f"{scoped}/{{name}}": {
                "get": self.make("read", "get"), "put": self.make("replace", "put"),
                "patch": self.make("patch", "patch"), "delete": self.make("delete", "delete"),
                "parameters": [_path_param("name"), *scope]},
        }
        if namespaced:
            paths[f"{base}/{self.plural}"] = {"get": self.make("list", "list", everywhere=True)}
        return paths

    def make(self, verb: str, action: str, everywhere: bool = False) -> Json:
        """An operation, named as the server names it (`patchAppsV1NamespacedDeployment`)."""
        scope = "Namespaced" if self.resource.namespaced and not everywhere else ""
        suffix = "ForAllNamespaces" if everywhere else ""
        gvk = {"group": self.group, "version": self.version, "kind": self.resource.kind}
        operation: Json = {
            "operationId": f"{verb}{_camel(self.group, self.version)}{scope}"
                           f"{self.resource.kind}{suffix}",
            "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
            "parameters": _query_params(action),
            "responses": {"200": _response(self.kind if action != "list" else None)}}
        body = {"put": self.kind, "post": self.kind, "patch": PATCH}.get(action)
        if body is not None:
            types = PATCH_TYPES if action == "patch" else ("*/*",)
            operation["requestBody"] = {"required": True, "content": {
                t: {"schema": {"$ref": REF + body}} for t in types}}
            operation["responses"]["201"] = _response(self.kind)
        return operation


def _subresource_path(group: str, version: str, plural: str, sub: str, info: Subresource,
                      kind: str) -> Json:
    """A pod's `log` (GET, text) or `eviction` (POST of a policy/v1 Eviction)."""
    path = f"/{_prefix(group, version)}/namespaces/{{namespace}}/{plural}/{{name}}/{sub}"
    posted = info.method == "POST"
    operation: Json = {
        "operationId": f"{'create' if posted else 'read'}{_camel(group, version)}Namespaced"
                       f"{SERVED[(group, plural)].kind}{sub.capitalize()}",
        "x-kubernetes-action": "post" if posted else "get",
        "x-kubernetes-group-version-kind": {"group": info.group, "version": info.version,
                                            "kind": info.kind},
        "responses": {"200": _response(kind) if posted else {
            "description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}}}
    if posted:
        operation["requestBody"] = {"content": {"*/*": {"schema": {"$ref": REF + kind}}},
                                    "required": True}
    return {path: {info.method.lower(): operation,
                   "parameters": [_path_param("name"), _path_param("namespace")]}}


def _query_params(action: str) -> list[Json]:
    names = {"list": ("labelSelector", "fieldSelector", "limit", "resourceVersion",
                      "timeoutSeconds", "watch"),
             "post": ("dryRun", "fieldManager", "fieldValidation"),
             "put": ("dryRun", "fieldManager", "fieldValidation"),
             "patch": ("dryRun", "fieldManager", "fieldValidation", "force"),
             "delete": ("dryRun", "gracePeriodSeconds", "propagationPolicy")}.get(action, ())
    types = {"limit": "integer", "timeoutSeconds": "integer", "gracePeriodSeconds": "integer",
             "watch": "boolean", "force": "boolean"}
    return [{"name": name, "in": "query", "schema": {"type": types.get(name, "string"),
                                                      "uniqueItems": True}}
            for name in names]


def _path_param(name: str) -> Json:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "uniqueItems": True}}


def _response(kind: str | None) -> Json:
    schema = {"$ref": REF + kind} if kind else {"type": "object"}  # lists: not described
    return {"description": "OK", "content": {"application/json": {"schema": schema}}}


def _camel(group: str, version: str) -> str:
    """`apps`, `v1` -> `AppsV1`; `rbac.authorization.k8s.io` -> `RbacAuthorization`, as the
    server names operations (built-in groups lose `.k8s.io`; the core group is `Core`)."""
    name = group.removesuffix(".k8s.io") if group else "core"
    return "".join(part.capitalize() for part in re.split(r"[.-]", name)) + version.capitalize()
