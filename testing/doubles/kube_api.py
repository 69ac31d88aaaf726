"""What the Kubernetes API test double serves and answers: resources, selectors, Status errors.

Facts from the Kubernetes API reference (https://kubernetes.io/docs/reference/using-api/) and
the field selectors each kind registers (pkg/registry/core/{pod,event}/strategy.go).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

Json = dict[str, Any]
Key = tuple[str, str, str, str]  # group, plural, namespace ("" when cluster-scoped), name
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)

# Field selector -> path in the object, beyond metadata.name and metadata.namespace.
POD_FIELDS = {f: f for f in ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                             "spec.serviceAccountName", "status.phase", "status.podIP",
                             "status.nominatedNodeName")}
EVENT_FIELDS = {
    **{f"involvedObject.{f}": f"involvedObject.{f}" for f in (
        "kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")},
    "reason": "reason", "reportingComponent": "reportingComponent", "type": "type",
    "source": "source.component",
}


@dataclass(frozen=True)
class Resource:
    """One served resource; the names and versions are what discovery reports of it."""

    kind: str
    namespaced: bool = True
    status: bool = True  # a status subresource: only controllers write `status`
    builtin: bool = True  # strategic merge patch needs a built-in kind's Go types
    fields: tuple[tuple[str, str], ...] = ()  # extra field selectors: (name, object path)
    versions: tuple[str, ...] = ("v1",)  # served versions, the preferred first
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()


KUEUE = ("v1beta2", "v1beta1")  # Kueue v0.19: both served, v1beta2 stored and preferred
RAY = ("v1", "v1alpha1")  # KubeRay v1.7: both served, v1 stored
ALL = ("all",)

# Built-in kinds as k8s.io/api v1.37 registers them; custom resources as the CRDs vendored in
# generator/schemas/crds (names, scope, short names and categories from the CRDs' `spec.names`).
SERVED: dict[tuple[str, str], Resource] = {
    ("", "pods"): Resource("Pod", fields=tuple(POD_FIELDS.items()), short_names=("po",),
                           categories=ALL),
    ("", "events"): Resource("Event", status=False, fields=tuple(EVENT_FIELDS.items()),
                             short_names=("ev",)),
    ("", "nodes"): Resource("Node", namespaced=False, short_names=("no",)),
    ("", "namespaces"): Resource("Namespace", namespaced=False, short_names=("ns",)),
    ("", "serviceaccounts"): Resource("ServiceAccount", status=False, short_names=("sa",)),
    ("", "configmaps"): Resource("ConfigMap", status=False, short_names=("cm",)),
    ("", "secrets"): Resource("Secret", status=False),
    ("", "services"): Resource("Service", short_names=("svc",), categories=ALL),
    ("apps", "deployments"): Resource("Deployment", short_names=("deploy",), categories=ALL),
    ("apps", "daemonsets"): Resource("DaemonSet", short_names=("ds",), categories=ALL),
    ("batch", "jobs"): Resource("Job", categories=ALL),
    ("networking.k8s.io", "networkpolicies"): Resource("NetworkPolicy", status=False,
                                                       short_names=("netpol",)),
    # Status is written by the API server's type checker (ValidatingAdmissionPolicyStatus).
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): Resource(
        "ValidatingAdmissionPolicy", namespaced=False),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): Resource(
        "ValidatingAdmissionPolicyBinding", namespaced=False, status=False),
    ("rbac.authorization.k8s.io", "roles"): Resource("Role", status=False),
    ("rbac.authorization.k8s.io", "rolebindings"): Resource("RoleBinding", status=False),
    ("rbac.authorization.k8s.io", "clusterroles"): Resource("ClusterRole", namespaced=False,
                                                            status=False),
    ("rbac.authorization.k8s.io", "clusterrolebindings"): Resource(
        "ClusterRoleBinding", namespaced=False, status=False),
    ("scheduling.k8s.io", "priorityclasses"): Resource("PriorityClass", namespaced=False,
                                                       status=False, short_names=("pc",)),
    ("ray.io", "rayjobs"): Resource("RayJob", builtin=False, versions=RAY, categories=ALL),
    ("ray.io", "rayclusters"): Resource("RayCluster", builtin=False, versions=RAY,
                                        categories=ALL),
    ("kueue.x-k8s.io", "workloads"): Resource("Workload", builtin=False, versions=KUEUE,
                                              short_names=("wl",)),
    ("kueue.x-k8s.io", "clusterqueues"): Resource("ClusterQueue", namespaced=False,
                                                  builtin=False, versions=KUEUE,
                                                  short_names=("cq",)),
    ("kueue.x-k8s.io", "localqueues"): Resource("LocalQueue", builtin=False, versions=KUEUE,
                                                short_names=("queue", "queues", "lq")),
    ("kueue.x-k8s.io", "resourceflavors"): Resource(
        "ResourceFlavor", namespaced=False, status=False, builtin=False, versions=KUEUE,
        short_names=("flavor", "flavors", "rf")),
    ("kueue.x-k8s.io", "workloadpriorityclasses"): Resource(
        "WorkloadPriorityClass", namespaced=False, status=False, builtin=False,
        versions=KUEUE, short_names=("wpc",)),
    ("clickhouse.altinity.com", "clickhouseinstallations"): Resource(
        "ClickHouseInstallation", builtin=False, short_names=("chi",)),
    # GKE's multi-network objects (gke-networking-api's CRDs: cluster-scoped, with status).
    ("networking.gke.io", "networks"): Resource("Network", namespaced=False, builtin=False),
    ("networking.gke.io", "gkenetworkparamsets"): Resource(
        "GKENetworkParamSet", namespaced=False, builtin=False),
    ("clickhouse-keeper.altinity.com", "clickhousekeeperinstallations"): Resource(
        "ClickHouseKeeperInstallation", builtin=False, short_names=("chk",)),
    # Argo CD's Application has no status subresource: its controller writes the object.
    ("argoproj.io", "applications"): Resource("Application", status=False, builtin=False,
                                              versions=("v1alpha1",),
                                              short_names=("app", "apps")),
    ("argoproj.io", "applicationsets"): Resource("ApplicationSet", builtin=False,
                                                 versions=("v1alpha1",),
                                                 short_names=("appset", "appsets")),
}


class Subresource(NamedTuple):
    """A served subresource: the one method it answers and the kind it takes or returns."""

    method: str
    group: str
    version: str
    kind: str


SUBRESOURCES: dict[tuple[str, str, str], Subresource] = {
    ("", "pods", "log"): Subresource("GET", "", "v1", "Pod"),
    ("", "pods", "eviction"): Subresource("POST", "policy", "v1", "Eviction"),
}
VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")


class Change(NamedTuple):
    """One recorded change, as a watch reports it."""

    version: int
    type: str  # ADDED, MODIFIED or DELETED
    resource: tuple[str, str]  # group, plural
    object: Json


class ApiError(Exception):
    """A failure the double answers with a `Status` body and the real code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: Json | None = None):
        super().__init__(message)
        self.code, self.reason, self.details = code, reason, details or {}

    def status(self) -> Json:
        found = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": str(self), "reason": self.reason, "details": self.details,
                 "code": self.code}
        return {k: v for k, v in found.items() if v or k == "metadata"}  # Go's omitempty


def resource_name(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(key: Key) -> ApiError:
    group, plural, _, name = key
    return ApiError(404, "NotFound", f'{resource_name(group, plural)} "{name}" not found',
                    {"name": name, "group": group, "kind": plural})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


_SET_TERM = re.compile(r"^\s*(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")


def label_selected(obj: Json, selector: str | None) -> bool:
    """Label selectors as the server parses them (k8s.io/apimachinery/pkg/labels): equality
    (`a=b`, `a==b`, `a!=b`), sets (`a in (b,c)`, `a notin (b)`) and existence (`a`, `!a`)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(_label_term(labels, term) for term in _terms(selector or ""))


def _terms(selector: str) -> list[str]:
    """Split on the commas that are not inside a set's parentheses."""
    terms, depth, start = [], 0, 0
    for at, char in enumerate(selector + ","):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(selector[start:at].strip())
            start = at + 1
    return [t for t in terms if t]


def _label_term(labels: dict[str, str], term: str) -> bool:
    matched = _SET_TERM.match(term)
    if matched:
        values = {v.strip() for v in matched["values"].split(",")}
        present = labels.get(matched["key"]) in values
        return present if matched["op"] == "in" else not present
    if "!=" in term:
        key, value = term.split("!=", 1)
        return labels.get(key.strip()) != value.strip()
    if "=" in term:
        key, value = term.replace("==", "=").split("=", 1)
        return labels.get(key.strip()) == value.strip()
    return (term[1:].strip() not in labels) if term.startswith("!") else term in labels


FieldTerm = tuple[str, str, bool]  # object path, value, negated


def field_terms(resource: Resource, selector: str | None) -> list[FieldTerm]:
    """A field selector over the fields the kind registers; any other field is a 400."""
    fields = {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace",
              **dict(resource.fields)}
    terms = []
    for term in filter(None, (selector or "").split(",")):
        negate = "!=" in term
        name, value = term.replace("!=", "=").replace("==", "=").split("=", 1)
        if name not in fields:
            raise bad_request(f"field label not supported: {name}")
        terms.append((fields[name], value, negate))
    return terms


def fields_match(obj: Json, terms: list[FieldTerm]) -> bool:
    return all((_lookup(obj, path) == value) != negate for path, value, negate in terms)


def _lookup(obj: Json, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def validate(key: Key, body: Json, version: str) -> None:
    """What the server checks of a created or applied object: kind, version, name, namespace."""
    resource = SERVED[key[:2]]
    expected = f"{key[0]}/{version}" if key[0] else version
    # The request's path supplies a missing kind or apiVersion, as the server's decoder does.
    body.setdefault("kind", resource.kind)
    body.setdefault("apiVersion", expected)
    if body["kind"] != resource.kind or body["apiVersion"] != expected:
        raise bad_request(f"the API version in the data ({body.get('apiVersion')}) does not "
                          f"match the expected API version ({expected}) or kind "
                          f"({resource.kind})")
    meta = body.get("metadata") or {}
    if not resource.namespaced:  # cleared, as the server does for cluster-scoped kinds
        meta.pop("namespace", None)
    if meta.get("namespace") not in (None, key[2]):
        raise bad_request("the namespace of the provided object does not match the namespace "
                          "sent on the request")
    causes = _name_causes(key, meta.get("name", ""))
    if causes:
        name = meta.get("name", "")
        raise ApiError(422, "Invalid", f'{resource.kind}.{key[0] or "core"} "{name}" is '
                       "invalid: " + ", ".join(causes),
                       {"name": name, "kind": resource.kind,
                        "causes": [{"message": c} for c in causes]})
    if resource.namespaced:
        meta["namespace"] = key[2]


def _name_causes(key: Key, name: str) -> list[str]:
    if not name:
        return ["metadata.name: Required value: name or generateName is required"]
    causes = []
    if not DNS_SUBDOMAIN.match(name) or len(name) > 253:
        causes.append(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
                      "subdomain must consist of lower case alphanumeric characters, '-' "
                      "or '.'")
    if name != key[3]:
        causes.append(f'metadata.name: Invalid value: "{name}": the name of the object '
                      f"({name}) does not match the name on the URL ({key[3]})")
    return causes
