"""The Kubernetes API through the `kubernetes` client: connect by kube context, server-side
apply with field manager `gkr`, get/list/delete/watch, events and pod logs.

Every object travels as a plain dict (the JSON the API serves). API failures become
`ApiFailed` (exit 4) or its subclass `NotFound`, carrying the server's Status message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError

from generator.cluster.kinds import POD, Kind, kind_of
from generator.errors import ToolFailed

FIELD_MANAGER = "gkr"
APPLY_PATCH = "application/apply-patch+yaml"
Obj = dict[str, Any]


class ApiFailed(ToolFailed):
    """The API server refused or failed a request."""

    def __init__(self, message: str, status: int | None = None, reason: str = "") -> None:
        self.status, self.reason = status, reason
        super().__init__(message)


class NotFound(ApiFailed):
    """The object does not exist (HTTP 404)."""

    exit_code = 1


def _wrap(error: ApiException, what: str) -> ApiFailed:
    """The server's Status message, not the client's dump of headers."""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") or error.reason or "request failed"
    kind = NotFound if error.status == 404 else ApiFailed
    return kind(f"{what}: {message} (HTTP {error.status})", error.status, body.get("reason", ""))


class KubeApi:
    """One cluster's API, reached through a kubeconfig context."""

    def __init__(self, api_client: client.ApiClient, context: str) -> None:
        self.client, self.context = api_client, context
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)

    @classmethod
    def connect(cls, context: str, kubeconfig: str | None = None) -> KubeApi:
        """Connect with `context` from $KUBECONFIG (or ~/.kube/config)."""
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        try:
            api_client = config.new_client_from_config(config_file=path, context=context)
        except (ConfigException, OSError) as error:
            raise ToolFailed(f"kube context {context!r} (from the cluster catalog) is not "
                             f"usable: {error}; run `gcloud container clusters get-credentials`"
                             ) from None
        return cls(api_client, context)

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ApiException as error:
            raise _wrap(error, what) from None
        except HTTPError as error:
            raise ApiFailed(f"{what}: cluster API unreachable ({error})") from None

    def _plain(self, value: Any) -> Any:
        return self.client.sanitize_for_serialization(value)

    def apply(self, manifest: Obj, force: bool = True) -> Obj:
        """Server-side apply (field manager `gkr`); returns the object the server holds.

        A raw PATCH, because the typed client maps only 200 to a body while the API server
        answers an apply that creates the object with 201 Created.
        """
        kind, meta = kind_of(manifest), manifest["metadata"]
        what = f"apply {kind.kind} {meta['namespace']}/{meta['name']}"
        path = f"{_prefix(kind)}/namespaces/{meta['namespace']}/{kind.plural}/{meta['name']}"
        return self.request(what, "PATCH", path, manifest, APPLY_PATCH,
                            {"fieldManager": FIELD_MANAGER, "force": str(force).lower()})

    def request(self, what: str, method: str, path: str, body: Obj | None = None,
                content_type: str = "application/json", query: dict[str, str] | None = None
                ) -> Obj:
        """A raw call through the client's transport (auth, TLS) for paths without a typed API."""
        url = self.client.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        self.client.update_params_for_auth(headers, [], ["BearerToken"], url, method, body)
        response = self._call(what, self.client.call_api, method, url, headers, body)
        response.read()
        if not 200 <= response.status <= 299:
            raise _wrap(ApiException(http_resp=response), what)
        return json.loads(response.data)

    def get(self, kind: Kind, namespace: str, name: str) -> Obj:
        what = f"get {kind.kind} {namespace}/{name}"
        if not kind.group:
            path = f"{_prefix(kind)}/namespaces/{namespace}/{kind.plural}/{name}"
            return self.request(what, "GET", path)
        return self._call(what, self.custom.get_namespaced_custom_object, kind.group,
                          kind.version, namespace, kind.plural, name)

    def find(self, kind: Kind, namespace: str, name: str) -> Obj | None:
        try:
            return self.get(kind, namespace, name)
        except NotFound:
            return None

    def list(self, kind: Kind, namespace: str, selector: str | None = None) -> list[Obj]:
        what = f"list {kind.plural} in {namespace}"
        if not kind.group:
            path = f"{_prefix(kind)}/namespaces/{namespace}/{kind.plural}"
            query = {"labelSelector": selector} if selector else None
            return self.request(what, "GET", path, query=query)["items"]
        found = self._call(what, self.custom.list_namespaced_custom_object, kind.group,
                           kind.version, namespace, kind.plural, label_selector=selector)
        return found["items"]

    def delete(self, kind: Kind, namespace: str, name: str) -> None:
        what = f"delete {kind.kind} {namespace}/{name}"
        if not kind.group:
            path = f"{_prefix(kind)}/namespaces/{namespace}/{kind.plural}/{name}"
            self.request(what, "DELETE", path)
            return
        self._call(what, self.custom.delete_namespaced_custom_object, kind.group, kind.version,
                   namespace, kind.plural, name, propagation_policy="Background")

    def node(self, name: str) -> Obj:
        return self._plain(self._call(f"get node {name}", self.core.read_node, name))

    def watch(self, kind: Kind, namespace: str, selector: str | None, timeout_s: int,
              since: str | None = None) -> Iterator[tuple[str, Obj]]:
        """(event type, object) as the server reports changes, until `timeout_s`."""
        what = f"watch {kind.plural} in {namespace}"
        query = {"watch": "true", "timeoutSeconds": str(timeout_s)}
        if selector:
            query["labelSelector"] = selector
        if since:
            query["resourceVersion"] = since
        path = f"{_prefix(kind)}/namespaces/{namespace}/{kind.plural}"
        url = f"{self.client.configuration.host}{path}?{urlencode(query)}"
        headers = {"Accept": "application/json"}
        self.client.update_params_for_auth(headers, [], ["BearerToken"], url, "GET", None)
        rest = self._call(what, self.client.call_api, "GET", url, headers)
        if not 200 <= rest.status <= 299:
            rest.read()
            raise _wrap(ApiException(http_resp=rest), what)
        response = rest.response
        try:
            for line in _lines(response):
                event = json.loads(line)
                if event["type"] == "ERROR":
                    raise ApiFailed(f"{what}: {event['object'].get('message')}")
                yield event["type"], event["object"]
        finally:
            response.release_conn()

    def logs(self, namespace: str, pod: str, container: str | None = None,
             follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """Lines of a pod's log; while following, as the container writes them."""
        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False}
        if container:
            kwargs["container"] = container
        if tail is not None:
            kwargs["tail_lines"] = tail
        response = self._call(f"logs of pod {namespace}/{pod}",
                              self.core.read_namespaced_pod_log, pod, namespace, **kwargs)
        try:
            yield from (line.decode(errors="replace") for line in _lines(response))
        finally:
            response.release_conn()

    def pods(self, namespace: str, selector: str) -> list[Obj]:
        return self.list(POD, namespace, selector)


def _prefix(kind: Kind) -> str:
    return f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-separated records of a streamed response, as they arrive."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line)
    if pending:
        yield pending
