"""The Kubernetes seam on the official `kubernetes` client.

The client handles kubeconfig, in-cluster tokens and TLS; requests go through its generic
`param_serialize`/`call_api` so objects stay the API's JSON (no model round trip, which
would drop fields the generated models do not know).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from runtime.errors import ConfigError
from runtime.warden.config import KubernetesSettings
from runtime.warden.errors import ApiFailure, Conflict

Json = dict[str, Any]
MERGE = "application/merge-patch+json"
RAY = "/apis/ray.io/v1"


def api_client(settings: KubernetesSettings) -> k8s.ApiClient:
    """A client for the configured kubeconfig, or in-cluster credentials when none is set."""
    configuration = k8s.Configuration()
    try:
        if settings.kubeconfig:
            k8s_config.load_kube_config(settings.kubeconfig, client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError) as error:
        raise ConfigError("kubernetes.kubeconfig", str(error)) from error
    return k8s.ApiClient(configuration)


class KubeCluster:
    """`Cluster` on a real API server."""

    def __init__(self, api: k8s.ApiClient, timeout_s: float = 30.0) -> None:
        self.api, self.timeout_s = api, timeout_s

    def request(self, method: str, path: str, query: dict[str, str] | None = None,
                body: Json | None = None, content_type: str = "application/json") -> Json:
        """One API call; non-2xx answers raise `ApiFailure` (409 raises `Conflict`)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        prepared = self.api.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params=headers, body=body, auth_settings=["BearerToken"],
        )
        verb, url, headers, payload = prepared[:4]
        try:
            response = self.api.call_api(verb, url, headers, payload,
                                         _request_timeout=self.timeout_s)
        except OSError as error:
            raise ApiFailure("kubernetes", 0, f"{method} {path}", str(error)) from error
        data = response.read()
        if not 200 <= response.status < 300:
            kind = Conflict if response.status == 409 else ApiFailure
            raise kind("kubernetes", response.status, f"{method} {path}", data.decode())
        return json.loads(data) if data else {}

    def list_nodes(self, selector: str) -> list[Json]:
        return self.request("GET", "/api/v1/nodes", {"labelSelector": selector})["items"]

    def get_node(self, name: str) -> Json:
        return self.request("GET", f"/api/v1/nodes/{quote(name)}")

    def patch_node(self, name: str, patch: Json) -> Json:
        return self.request("PATCH", f"/api/v1/nodes/{quote(name)}", body=patch,
                            content_type=MERGE)

    def node_events(self, name: str) -> list[Json]:
        selector = f"involvedObject.kind=Node,involvedObject.name={name}"
        return self.request("GET", "/api/v1/events", {"fieldSelector": selector})["items"]

    def pods_on_node(self, name: str) -> list[Json]:
        query = {"fieldSelector": f"spec.nodeName={name}"}
        return self.request("GET", "/api/v1/pods", query)["items"]

    def list_pods(self, selector: str) -> list[Json]:
        return self.request("GET", "/api/v1/pods", {"labelSelector": selector})["items"]

    def evict(self, namespace: str, pod: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": pod, "namespace": namespace}}
        path = f"/api/v1/namespaces/{namespace}/pods/{quote(pod)}/eviction"
        try:
            self.request("POST", path, body=body)
        except ApiFailure as error:
            if error.status != 404:  # already gone: the eviction's goal is reached
                raise

    def post_event(self, namespace: str, event: Json) -> None:
        self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)

    def create_job(self, namespace: str, job: Json) -> Json:
        return self.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job)

    def get_job(self, namespace: str, name: str) -> Json:
        return self.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")

    def job_pods(self, namespace: str, job: str) -> list[Json]:
        query = {"labelSelector": f"job-name={job}"}
        return self.request("GET", f"/api/v1/namespaces/{namespace}/pods", query)["items"]

    def get_raycluster(self, namespace: str, name: str) -> Json:
        return self.request("GET", f"{RAY}/namespaces/{namespace}/rayclusters/{name}")

    def patch_raycluster(self, namespace: str, name: str, patch: Json) -> Json:
        path = f"{RAY}/namespaces/{namespace}/rayclusters/{name}"
        return self.request("PATCH", path, body=patch, content_type=MERGE)

    def list_rayjobs(self) -> list[Json]:
        return self.request("GET", f"{RAY}/rayjobs")["items"]
