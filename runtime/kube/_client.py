"""`Kube`: one cluster's API for gkr's commands and Warden alike.

Objects travel as plain dicts, the API's own JSON: no round trip through the generated models,
which would drop the fields they do not know (custom resources, newer API versions).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from runtime.kube._errors import NotFound
from runtime.kube._kinds import EVENT, KNOWN, POD, Kind

if TYPE_CHECKING:
    from runtime.kube._dynamic import Transport

Obj = dict[str, Any]
Objs = list[Obj]  # spelled once here: inside `Kube`, `list` names its method
FIELD_MANAGER = "gkr"
APPLY = "application/apply-patch+yaml"


class Patch(StrEnum):
    """The patch formats the API accepts, as their content types."""

    MERGE = "application/merge-patch+json"  # RFC 7386
    STRATEGIC = "application/strategic-merge-patch+json"  # built-in kinds only
    JSON = "application/json-patch+json"  # RFC 6902: a list of operations


class Kube:
    """A connected cluster: apply, create, get, list, patch, delete, watch, logs, evict."""

    def __init__(self, transport: Transport) -> None:
        self._http = transport

    @classmethod
    def connect(cls, context: str | None = None, kubeconfig: str | None = None, *,
                in_cluster: bool = False, timeout_s: float = 30.0) -> Kube:
        """Credentials of a kubeconfig context ($KUBECONFIG or `kubeconfig`; the current
        context when `context` is None), or of the pod's service account (`in_cluster`)."""
        from runtime.kube import _dynamic  # imports `kubernetes`: only once a command connects

        api = _dynamic.api_client(context, kubeconfig, in_cluster)
        return cls(_dynamic.Transport(api, timeout_s))

    @property
    def host(self) -> str:
        return self._http.host

    def kind(self, api_version: str, kind: str) -> Kind:
        """Where a kind is served: the static table, else the server's discovery."""
        known = KNOWN.get((api_version, kind))
        return known or self._http.discover(f"find {kind} in {api_version}", api_version, kind)

    def apply(self, manifest: Obj, *, force: bool = True,
              field_manager: str = FIELD_MANAGER) -> Obj:
        """Server-side apply; `force` takes over fields another manager owns."""
        kind, name, namespace = self._target(manifest)
        query = {"fieldManager": field_manager, "force": force}
        return self._http.send(f"apply {_named(kind, name, namespace)}", "PATCH",
                               self._http.path(kind, name, namespace), manifest, query, APPLY)

    def create(self, manifest: Obj, *, namespace: str | None = None) -> Obj:
        """POST a new object (`Conflict` when the name is taken)."""
        kind, name, namespace = self._target(manifest, namespace)
        return self._http.send(f"create {_named(kind, name or '(generated)', namespace)}",
                               "POST", self._http.path(kind, None, namespace), manifest)

    def get(self, kind: Kind, name: str, *, namespace: str | None = None) -> Obj:
        return self._http.send(f"get {_named(kind, name, namespace)}", "GET",
                               self._http.path(kind, name, namespace))

    def find(self, kind: Kind, name: str, *, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            return self.get(kind, name, namespace=namespace)
        except NotFound:
            return None

    def list(self, kind: Kind, *, namespace: str | None = None, labels: str | None = None,
             fields: str | None = None) -> Objs:
        """Objects of a kind in one namespace, or all (None), matching the selectors."""
        query = _selectors(labels, fields)
        found = self._http.send(f"list {_scope(kind, namespace, query)}", "GET",
                                self._http.path(kind, None, namespace), query=query)
        return list(found["items"])

    def patch(self, kind: Kind, name: str, patch: Any, *, namespace: str | None = None,
              patch_type: Patch = Patch.MERGE) -> Obj:
        """Patch an object; a JSON patch is a list of operations, the others are objects."""
        return self._http.send(f"patch {_named(kind, name, namespace)}", "PATCH",
                               self._http.path(kind, name, namespace), patch,
                               content_type=patch_type.value)

    def delete(self, kind: Kind, name: str, *, namespace: str | None = None) -> None:
        """Delete an object; its dependents (a Job's pods, ...) are collected after it."""
        self._http.send(f"delete {_named(kind, name, namespace)}", "DELETE",
                        self._http.path(kind, name, namespace),
                        query={"propagationPolicy": "Background"})

    def watch(self, kind: Kind, *, namespace: str | None = None, labels: str | None = None,
              fields: str | None = None, timeout_s: int = 30,
              since: str | None = None) -> Iterator[tuple[str, Obj]]:
        """(ADDED|MODIFIED|DELETED, object) as changes happen, until `timeout_s`; after the
        resourceVersion `since` when given (else the current objects come first as ADDED)."""
        query = _selectors(labels, fields)
        return self._http.watch(f"watch {_scope(kind, namespace, query)}",
                                self._http.path(kind, None, namespace), query, timeout_s, since)

    def logs(self, pod: str, *, namespace: str, container: str | None = None,
             follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """Lines of a container's log (the pod's only one when None); while following, as
        the container writes them; `tail`: only the last lines so far."""
        query: dict[str, Any] = {"follow": follow}
        if container:
            query["container"] = container
        if tail is not None:
            query["tailLines"] = tail
        return self._http.lines(f"logs of {_named(POD, pod, namespace)}",
                                self._http.path(POD, pod, namespace, "log"), query, follow)

    def evict(self, pod: str, *, namespace: str) -> None:
        """Evict a pod through the eviction API, which honours PodDisruptionBudgets."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace}}
        self._http.send(f"evict {_named(POD, pod, namespace)}", "POST",
                        self._http.path(POD, pod, namespace, "eviction"), body)

    def events(self, *, namespace: str | None = None, kind: str | None = None,
               name: str | None = None) -> Objs:
        """Events in a namespace (or all), of one involved object when `kind`/`name` given."""
        about = {"involvedObject.kind": kind, "involvedObject.name": name}
        fields = ",".join(f"{key}={value}" for key, value in about.items() if value)
        return self.list(EVENT, namespace=namespace, fields=fields or None)

    def _target(self, manifest: Obj, namespace: str | None = None
                ) -> tuple[Kind, str, str | None]:
        """The kind, name and namespace (None when cluster-scoped) of a manifest."""
        meta = manifest.get("metadata") or {}
        kind = self.kind(str(manifest.get("apiVersion", "")), str(manifest.get("kind", "")))
        where = (namespace or meta.get("namespace")) if kind.namespaced else None
        return kind, str(meta.get("name") or ""), where


def _named(kind: Kind, name: str, namespace: str | None) -> str:
    return f"{kind.kind} {namespace}/{name}" if namespace else f"{kind.kind} {name}"


def _selectors(labels: str | None, fields: str | None) -> dict[str, Any]:
    found = {"labelSelector": labels, "fieldSelector": fields}
    return {key: value for key, value in found.items() if value}


def _scope(kind: Kind, namespace: str | None, selectors: dict[str, Any]) -> str:
    where = f" in {namespace}" if namespace else (" in all namespaces" if kind.namespaced else "")
    matching = ",".join(selectors.values())
    return f"{kind.plural}{where}" + (f" matching {matching}" if matching else "")
