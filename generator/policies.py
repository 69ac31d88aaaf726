"""Policies every rendered job manifest must satisfy (run by `gkr validate`).

* it stays in its team's namespace on its cluster (the folder it is rendered into);
* the pod rules of generator.admission, which the cluster's ValidatingAdmissionPolicy holds
  too: no privileged container, host namespace, host port, Unconfined seccomp or unmasked
  /proc; host paths and added capabilities exactly those the accelerator catalog requires
  (and, in GPU pods, the node's telemetry folder: generator.telemetry);
* every image is pinned by digest, except the sidecar images the accelerator catalog
  itself names (GKE publishes those by tag; the catalog is reviewed like code);
* RBAC beside a workload only reads: a Role may get, list and watch its namespace's pods
  and their logs, and nothing cluster-wide (the in-cluster diagnosis of `gkr diagnose`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from generator.admission import CONTAINER_LISTS, HOST_NAMESPACES, Allowance, allowance
from generator.catalog import PINNED_IMAGE, Accelerator, Catalog
from generator.errors import Problem
from generator.paths import job_path
from generator.tree import Tree

JOB_PATH = re.compile(r"^kustomize/overlays/(?P<cluster>[^/]+)/jobs/(?P<namespace>[^/]+)/[^/]+$")
READ_VERBS = frozenset({"get", "list", "watch"})
READABLE = frozenset({"pods", "pods/log"})  # what a Role beside a workload may read


def check_job_policies(tree: Tree, catalog: Catalog) -> list[Problem]:
    """Every policy over every rendered job manifest."""
    accelerators = {job_path(job): job.accelerator for job in tree.jobs}
    problems = []
    for path, documents in sorted(tree.manifests.items()):
        match = JOB_PATH.match(path)
        if not match:
            continue
        cluster = catalog.clusters.get(match["cluster"])
        teams = {t.namespace for t in cluster.teams.values()} if cluster else set()
        for document in documents:
            where = f"{document.get('kind')}/{document.get('metadata', {}).get('name')}"
            found = _namespace(document, match["namespace"], teams) + rbac_problems(document)
            found += [f"{pod_path}: {message}" for pod_path, pod in pod_specs(document)
                      for message in pod_problems(pod, accelerators.get(path),
                                                  catalog.platform.telemetry.node_dir)]
            problems += [Problem(path, None, where, message) for message in found]
    return problems


def rbac_problems(document: dict[str, Any]) -> list[str]:
    """RBAC beside a workload may only read its own namespace's pods and their logs: what a
    diagnosis agent needs (seed §7.4), while changing things stays with people."""
    kind = document.get("kind")
    if kind in ("ClusterRole", "ClusterRoleBinding"):
        return [f"a {kind} reaches beyond the namespace; use a Role"]
    if kind == "RoleBinding" and (document.get("roleRef") or {}).get("kind") != "Role":
        return ["a RoleBinding binds only a Role of its namespace"]
    if kind != "Role":
        return []
    return [f"rules[{index}]: {message}" for index, rule in enumerate(document.get("rules") or [])
            for message in _rule_problems(rule)]


def _rule_problems(rule: dict[str, Any]) -> list[str]:
    verbs, resources = set(rule.get("verbs") or []), set(rule.get("resources") or [])
    groups = set(rule.get("apiGroups") or [])
    problems = []
    if not verbs <= READ_VERBS:
        problems.append(f"verbs {sorted(verbs - READ_VERBS)} change things; allowed: "
                        f"{', '.join(sorted(READ_VERBS))}")
    if groups != {""} or not resources <= READABLE or rule.get("resourceNames"):
        problems.append(f"resources {sorted(resources)} of API groups {sorted(groups)}; "
                        f"allowed: {', '.join(sorted(READABLE))} of the core group")
    if rule.get("nonResourceURLs"):
        problems.append("nonResourceURLs are cluster-wide")
    return problems


def _namespace(document: dict[str, Any], folder: str, teams: set[str]) -> list[str]:
    namespace = document.get("metadata", {}).get("namespace")
    if namespace != folder:
        return [f"namespace {namespace!r} leaves the folder's team namespace {folder!r}"]
    if namespace not in teams:
        return [f"namespace {namespace!r} is not a team namespace of the cluster "
                f"(allowed: {', '.join(sorted(teams))})"]
    return []


def pod_specs(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec inside a manifest (Pods, Jobs, RayJob/RayCluster head and workers)."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield path or "spec", node
            return
        for key, value in node.items():
            yield from pod_specs(value, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from pod_specs(value, f"{path}[{index}]")


def pod_images(documents: Iterable[Any]) -> tuple[str, ...]:
    """Every container image the documents' pods name, in order of first appearance."""
    return tuple(dict.fromkeys(container["image"] for document in documents
                               for _, pod in pod_specs(document)
                               for container in _containers(pod) if container.get("image")))


def pod_problems(pod: dict[str, Any], accelerator: Accelerator | None,
                 telemetry_dir: str | None = None) -> list[str]:
    """What one pod spec does beyond what its accelerator and, on a GPU node, the telemetry
    dump folder (`telemetry_dir`) require: the rules and allowance of generator.admission,
    which the cluster's ValidatingAdmissionPolicy holds too."""
    allowed = allowance(accelerator, telemetry_dir)
    problems = [f"host namespace {key} is not allowed" for key in HOST_NAMESPACES if pod.get(key)]
    for volume in pod.get("volumes", []):
        path = (volume.get("hostPath") or {}).get("path")
        if path is not None and path not in allowed.host_paths:
            problems.append(f"volume {volume.get('name')!r} mounts host path {path!r}, which "
                            "neither the accelerator catalog nor telemetry requires")
    if ((pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type") \
            == "Unconfined":
        problems.append("the pod runs seccomp Unconfined")
    for container in _containers(pod):
        problems += container_problems(container, allowed)
    return problems


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for key in CONTAINER_LISTS for c in pod.get(key) or []]


def container_problems(container: dict[str, Any], allowed: Allowance) -> list[str]:
    name, image = container.get("name"), container.get("image", "")
    sidecar = allowed.sidecars.get(str(name))
    context = container.get("securityContext") or {}
    problems = []
    if context.get("privileged"):
        problems.append(f"container {name!r} runs privileged")
    granted = set(sidecar.capabilities) if sidecar and sidecar.image == image else set()
    extra = sorted(set((context.get("capabilities") or {}).get("add") or []) - granted)
    if extra:
        problems.append(f"container {name!r} adds capabilities {extra} that the accelerator "
                        "catalog does not require")
    ports = [p.get("hostPort") for p in container.get("ports") or [] if p.get("hostPort")]
    if ports:
        problems.append(f"container {name!r} publishes host ports {ports}")
    if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append(f"container {name!r} runs seccomp Unconfined")
    if context.get("procMount", "Default") != "Default":
        problems.append(f"container {name!r} unmasks /proc (procMount)")
    if not re.fullmatch(PINNED_IMAGE, image) and not (sidecar and sidecar.image == image):
        problems.append(f"container {name!r} uses image {image!r}, which is not pinned: "
                        "use repository@sha256:<digest> or a name from images.yaml")
    return problems
