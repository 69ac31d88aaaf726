"""The transport under `Kube`, on the `kubernetes` package: credentials, the dynamic client's
requests and resource paths, its `Watch`, and the translation of their failures.

The only module that imports `kubernetes` (a noticeable fraction of a second); `Kube.connect`
imports it, so a command that never connects never pays for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.dynamic import DynamicClient, LazyDiscoverer, Resource
from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError
from kubernetes.watch import Watch
from urllib3.exceptions import HTTPError

from runtime.errors import ConfigError
from runtime.kube._errors import KubeError, NotFound, Unreachable, api_error
from runtime.kube._kinds import Kind

Query = dict[str, Any]
Timeout = float | tuple[float, float | None]
GKE_HINT = "for a GKE cluster, `gcloud container clusters get-credentials` writes one"


def api_client(context: str | None, kubeconfig: str | None, in_cluster: bool) -> k8s.ApiClient:
    """A client with the credentials of a kubeconfig context, or of the pod's service account."""
    configuration = k8s.Configuration()
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(config_file=_kubeconfig(kubeconfig), context=context,
                                        client_configuration=configuration,
                                        persist_config=False)
    except (ConfigException, OSError, yaml.YAMLError) as error:
        raise _config_error(context, kubeconfig, in_cluster, error) from error
    return k8s.ApiClient(configuration)


def _kubeconfig(path: str | None) -> str:
    # Read now, not at import: the package reads $KUBECONFIG once, when first imported.
    return path or os.environ.get("KUBECONFIG") or "~/.kube/config"


def _config_error(context: str | None, kubeconfig: str | None, in_cluster: bool,
                  error: Exception) -> ConfigError:
    if in_cluster:
        return ConfigError("service account", str(error), source="in-cluster credentials")
    which = f"context {context!r}" if context else "current context"
    return ConfigError(which, f"not usable: {error} ({GKE_HINT})", source=_kubeconfig(kubeconfig))


class _DeferredDiscovery:
    """The dynamic client's discoverer, deferred: the server's discovery runs at the first
    lookup of a kind outside the static table, never when the client is built."""

    def __init__(self, client: DynamicClient, cache_file: str | None) -> None:
        self._args = (client, cache_file)
        self._found: LazyDiscoverer | None = None

    def get(self, **search: Any) -> Resource:
        if self._found is None:
            self._found = LazyDiscoverer(*self._args)
        return self._found.get(**search)


class Transport:
    """Requests through the dynamic client; every failure leaves as a `KubeError`."""

    def __init__(self, api: k8s.ApiClient, timeout_s: float) -> None:
        self.dynamic = DynamicClient(api, discoverer=_DeferredDiscovery)
        self.host, self.timeout_s = api.configuration.host, timeout_s

    @staticmethod
    def path(kind: Kind, name: str | None = None, namespace: str | None = None,
             sub: str = "") -> str:
        """The URL path of a kind, one object of it, or its subresource (no namespace: all)."""
        resource = Resource(prefix="apis" if kind.group else "api", group=kind.group,
                            api_version=kind.version, kind=kind.kind, name=kind.plural,
                            namespaced=kind.namespaced)
        return resource.path(name=name, namespace=namespace) + (f"/{sub}" if sub else "")

    def send(self, what: str, method: str, path: str, body: Any = None,
             query: Query | None = None, content_type: str | None = None) -> Any:
        """One request; the answer as the API's JSON (plain dicts)."""
        with self._translated(what):
            return self.dynamic.request(
                method, path, body=body, query_params=list((query or {}).items()),
                content_type=content_type, serializer=_plain, _request_timeout=self.timeout_s)

    def lines(self, what: str, path: str, query: Query, follow: bool) -> Iterator[str]:
        """A streamed text answer, line by line as it arrives (a follower waits unbounded)."""
        read: float | None = None if follow else self.timeout_s
        with self._translated(what):
            response = self._open(path, query, (self.timeout_s, read))
            try:
                yield from _lines(response)
            finally:
                response.release_conn()

    def watch(self, what: str, path: str, query: Query, timeout_s: int,
              since: str | None) -> Iterator[tuple[str, Any]]:
        """(type, object) events until the server closes the watch after `timeout_s`."""
        read = (self.timeout_s, timeout_s + self.timeout_s)

        # Unannotated on purpose: Watch decodes into the model its return annotation names;
        # none keeps the objects plain dicts. Watch passes watch=True and timeout_seconds
        # (resource_version too), which the dynamic client puts in the query.
        def open_watch(**params):
            return self._open(path, query, read, **params)

        start = {"resource_version": since} if since else {}
        with self._translated(what):
            for event in Watch().stream(open_watch, timeout_seconds=timeout_s, **start):
                yield event["type"], event["raw_object"]

    def discover(self, what: str, api_version: str, kind: str) -> Kind:
        """A kind outside the static table, as the server's discovery describes it."""
        with self._translated(what):
            found = self.dynamic.resources.get(api_version=api_version, kind=kind)
        return Kind(found.kind, found.group or "", found.api_version, found.name,
                    bool(found.namespaced))

    def _open(self, path: str, query: Query, timeout: Timeout, **params: Any) -> Any:
        """A GET whose answer is left unread, to stream (the client never preloads)."""
        return self.dynamic.request("get", path, query_params=list(query.items()),
                                    serialize=False, _request_timeout=timeout, **params)

    @contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        try:
            yield
        except ApiException as error:
            raise api_error(what, error.status or 0, error.reason or "", error.body) from error
        except HTTPError as error:  # urllib3: refused, reset, timed out
            raise Unreachable(f"{what}: no answer from {self.host}: {_cause(error)}") from error
        except ResourceNotFoundError as error:
            raise NotFound(f"{what}: this cluster does not serve it (is its CRD installed?)",
                           404) from error
        except ResourceNotUniqueError as error:
            raise KubeError(f"{what}: discovery found more than one: {error}") from error


def _plain(_client: DynamicClient, body: Any) -> Any:
    """The dynamic client's serializer: keep the JSON as it came (no ResourceInstance)."""
    return body


def _lines(response: Any) -> Iterator[str]:
    """Newline-separated lines of a streamed answer as they arrive, the unterminated last one
    too (the `kubernetes` package's own splitter drops it: a log's final partial line)."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line.decode(errors="replace") for line in complete)
    if pending:
        yield pending.decode(errors="replace")


def _cause(error: HTTPError) -> str:
    # urllib3 wraps the socket's error in "pool (...): Max retries exceeded (Caused by ...)":
    # its last clause ("[Errno 111] Connection refused", "Read timed out.") is the news.
    reason = getattr(error, "reason", None) or error
    return str(reason).rpartition(": ")[2] or type(error).__name__
