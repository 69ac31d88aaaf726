"""Each job's NetworkPolicy: its pods' listeners are reachable from the job's own pods only.

A job's pods talk to each other on ports chosen at run time (Ray's GCS, raylets, object
managers and workers; torchft's Lighthouse, Managers, TCPStore and checkpoint transport;
the auxiliary proxies, runtime.aux.proxy.PORTS; NCCL and Gloo bootstrap), so among
themselves every port is open. From anywhere else the policy admits only:

* the Ray head's dashboard (DASHBOARD_PORT, job submission over HTTP) from the KubeRay
  operator's namespace (it polls a RayJob's status there) and, for a RayJob, from its
  submitter pod: KubeRay runs `ray job submit` in a batch/v1 Job named after the RayJob,
  whose pods the Job controller labels `batch.kubernetes.io/job-name` (Kubernetes
  "Well-Known Labels, Annotations and Taints");
* a DiLoCo synchroniser's Service ports (generator.experiments) from the pods of its run
  (learners on this cluster) and from the load balancer's source ranges (learners elsewhere;
  the link itself is CURVE-authenticated, issue 22 point 2);
* the metrics port of the Ray pods the platform's Prometheus scrapes (the add-on catalog's
  pod_monitors: Ray's own metrics, generator.pods.METRICS_PORT) from its namespace.

What still reaches the pods without a rule here: the kubelet's probes and `kubectl
port-forward`, which arrive from the node itself or inside the pod, and which GKE's network
policy enforcement (Dataplane V2, Calico) always admits from the local node
(https://kubernetes.io/docs/concepts/services-networking/network-policies/, "traffic to and
from the node where a Pod is running is always allowed"). Egress stays open: pods reach the
telemetry store, object stores and other regions.

Selectors are on GKR's labels (runtime.identity); a policy without `namespaceSelector`
selects pods of its own namespace only, so no other team's pod can match.
"""

from __future__ import annotations

from typing import Any

from generator.admission import NAMESPACE_NAME_LABEL
from generator.pods import DASHBOARD_PORT, role_ports
from generator.resolve import ResolvedJob
from runtime.identity import JobKind, Label, Role

SUBMITTER_LABEL = "batch.kubernetes.io/job-name"


def network_policy(job: ResolvedJob) -> dict[str, Any]:
    own = {"podSelector": {"matchLabels": {Label.JOB: job.name}}}
    ingress: list[dict[str, Any]] = [{"from": [own]}]
    if Role.HEAD in job.traits.roles:
        ingress.append(_dashboard(job))
    if job.exposure is not None:
        ingress += _exposed(job)
    ingress += _scraped(job)
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": job.name, "namespace": job.namespace, "labels": job.labels,
                     "annotations": job.annotations},
        "spec": {"podSelector": {"matchLabels": {Label.JOB: job.name}},
                 "policyTypes": ["Ingress"], "ingress": ingress},
    }


def _dashboard(job: ResolvedJob) -> dict[str, Any]:
    operator = {"namespaceSelector": {"matchLabels": {
        NAMESPACE_NAME_LABEL: job.platform.ray_operator_namespace}}}
    peers = [operator]
    if job.kind == JobKind.RAYJOB:
        peers.append({"podSelector": {"matchLabels": {SUBMITTER_LABEL: job.name}}})
    return {"from": peers, "ports": [{"protocol": "TCP", "port": DASHBOARD_PORT}]}


def _scraped(job: ResolvedJob) -> list[dict[str, Any]]:
    """One rule per scraping namespace, on the ports it scrapes of this job's roles (a port
    name no pod of the role has is the platform's to report, generator.platform.monitoring)."""
    by_namespace: dict[str, set[int]] = {}
    for scrape in job.scrapes:
        role = Role(scrape.role)
        port = role_ports(role).get(scrape.port) if role in job.traits.roles else None
        if port is not None:
            by_namespace.setdefault(scrape.namespace, set()).add(port)
    return [{"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}],
             "ports": [{"protocol": "TCP", "port": port} for port in sorted(ports)]}
            for namespace, ports in sorted(by_namespace.items())]


def _exposed(job: ResolvedJob) -> list[dict[str, Any]]:
    assert job.exposure is not None
    service = job.exposure.spec
    ports = [{"protocol": p.get("protocol", "TCP"), "port": p.get("targetPort", p["port"])}
             for p in service["ports"]]
    peers: list[dict[str, Any]] = []
    if job.workload.run:
        peers.append({"podSelector": {"matchLabels": {Label.RUN: job.workload.run}}})
    peers += [{"ipBlock": {"cidr": cidr}} for cidr in service.get("loadBalancerSourceRanges", [])]
    # An empty `from` would admit every source: a rule is rendered only with peers.
    return [{"from": peers, "ports": ports}] if peers else []
