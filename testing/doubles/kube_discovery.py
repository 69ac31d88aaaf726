"""What the Kubernetes API test double tells clients before they act: `/version` and discovery.

Discovery comes in the two forms a v1.37 server answers, chosen by the request's Accept header
as the server does (k8s.io/apiserver/pkg/endpoints/discovery/aggregated/handler.go):

* aggregated (apidiscovery.k8s.io/v2 `APIGroupDiscoveryList`, one document for `/api` and one
  for `/apis`) when the Accept header asks for it, as kubectl and client-go v1.30+ do;
* legacy otherwise: `APIVersions` at `/api`, `APIGroupList` at `/apis`, `APIGroup` at
  `/apis/<group>` and an `APIResourceList` per group version, as the `kubernetes` package's
  dynamic client reads them.

Both list only what `kube_api.SERVED` and `kube_api.SUBRESOURCES` serve, with the verbs the
double answers (`kube_api.VERBS`: no `deletecollection`).
"""

from __future__ import annotations

import re
from functools import cache

from testing.doubles.kube_api import SERVED, SUBRESOURCES, VERBS, Json, Resource, Subresource

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_ASKS_AGGREGATED = re.compile(r"g=apidiscovery\.k8s\.io;\s*v=v2;\s*as=APIGroupDiscoveryList")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)(?:/(?P<version>[^/]+))?$")
SERVER_VERSION: Json = {
    "major": "1", "minor": "37", "emulationMajor": "1", "emulationMinor": "37",
    "minCompatibilityMajor": "1", "minCompatibilityMinor": "36",
    "gitVersion": "v1.37.0+double", "gitCommit": "", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.25.0", "compiler": "gc",
    "platform": "linux/amd64",
}


def document(path: str, accept: str, address: str) -> tuple[str, Json] | None:
    """The (content type, body) the server answers a discovery path with; None if not one."""
    path = path.rstrip("/") or "/"
    if path == "/version":
        return "application/json", SERVER_VERSION
    aggregated = _ASKS_AGGREGATED.search(accept) is not None
    if path in ("/api", "/apis") and aggregated:
        return AGGREGATED, aggregated_list(path == "/api")
    if path == "/api":
        return "application/json", {
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": address}]}
    if path == "/apis":
        return "application/json", {"kind": "APIGroupList", "apiVersion": "v1",
                                    "groups": [api_group(g) for g in groups()]}
    if path == "/api/v1":
        return "application/json", resource_list("", "v1")
    return _group_document(path)


def _group_document(path: str) -> tuple[str, Json] | None:
    match = _GROUP.match(path)
    if match is None or match["group"] not in groups():
        return None
    group, version = match["group"], match["version"]
    if version is None:
        return "application/json", {"kind": "APIGroup", "apiVersion": "v1", **api_group(group)}
    if version not in group_versions(group):
        return None
    return "application/json", resource_list(group, version)


# ---- what is served, by group ----------------------------------------------------------------
@cache
def groups() -> tuple[str, ...]:
    """The named groups served (not the core group), in the order first served."""
    return tuple(dict.fromkeys(g for g, _ in SERVED if g))


@cache
def group_versions(group: str) -> tuple[str, ...]:
    """A group's versions, the preferred first: the versions any of its resources serves."""
    return tuple(dict.fromkeys(v for (g, _), r in SERVED.items() if g == group
                               for v in r.versions))


def _served(group: str, version: str) -> list[tuple[str, Resource]]:
    return [(p, r) for (g, p), r in SERVED.items() if g == group and version in r.versions]


def _group_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version


# ---- legacy discovery ------------------------------------------------------------------------
def api_group(group: str) -> Json:
    versions = [{"groupVersion": _group_version(group, v), "version": v}
                for v in group_versions(group)]
    return {"name": group, "versions": versions, "preferredVersion": versions[0]}


@cache
def resource_list(group: str, version: str) -> Json:
    """The `APIResourceList` of a group version: its resources, then their subresources."""
    resources: list[Json] = []
    for plural, resource in _served(group, version):
        resources.append(_api_resource(plural, resource))
        resources += [_api_subresource(f"{plural}/{sub}", resource, info)
                      for (g, p, sub), info in SUBRESOURCES.items() if (g, p) == (group, plural)]
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": _group_version(group, version), "resources": resources}


def _api_resource(plural: str, resource: Resource) -> Json:
    found: Json = {"name": plural, "singularName": resource.singular,
                   "namespaced": resource.namespaced, "kind": resource.kind,
                   "verbs": list(VERBS)}
    if resource.short_names:
        found["shortNames"] = list(resource.short_names)
    if resource.categories:
        found["categories"] = list(resource.categories)
    return found


def _api_subresource(name: str, resource: Resource, info: Subresource) -> Json:
    found: Json = {"name": name, "singularName": "", "namespaced": resource.namespaced,
                   "kind": info.kind, "verbs": [_verb(info)]}
    if info.group:  # a subresource taking another group's kind names it (drain looks)
        found |= {"group": info.group, "version": info.version}
    return found


def _verb(info: Subresource) -> str:
    return "get" if info.method == "GET" else "create"


# ---- aggregated discovery (apidiscovery.k8s.io/v2) -----------------------------------------
@cache
def aggregated_list(core: bool) -> Json:
    """The `APIGroupDiscoveryList` of `/api` (the core group) or of `/apis` (the others)."""
    names = ("",) if core else groups()
    items = [_group_discovery(name) for name in names]
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {}, "items": items}


def _group_discovery(group: str) -> Json:
    meta: Json = {"name": group, "creationTimestamp": None} if group else {
        "creationTimestamp": None}
    versions = ["v1"] if not group else list(group_versions(group))
    return {"metadata": meta, "versions": [
        {"version": v, "resources": [_discovered(group, v, p, r) for p, r in _served(group, v)],
         "freshness": "Current"} for v in versions]}


def _discovered(group: str, version: str, plural: str, resource: Resource) -> Json:
    found: Json = {
        "resource": plural, "singularResource": resource.singular,
        "responseKind": {"group": group, "version": version, "kind": resource.kind},
        "scope": "Namespaced" if resource.namespaced else "Cluster", "verbs": list(VERBS)}
    if resource.short_names:
        found["shortNames"] = list(resource.short_names)
    if resource.categories:
        found["categories"] = list(resource.categories)
    subresources = [
        {"subresource": sub, "verbs": [_verb(info)],
         "responseKind": {"group": info.group, "version": info.version, "kind": info.kind}}
        for (g, p, sub), info in SUBRESOURCES.items() if (g, p) == (group, plural)]
    if subresources:
        found["subresources"] = subresources
    return found
