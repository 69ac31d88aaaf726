"""What gkr refuses, the cluster refuses (issue 22, point 9): the committed
ValidatingAdmissionPolicy, evaluated by a real CEL engine (tests/platform/admission_cel.py),
admits every committed job's pods and refuses each class of hostile pod, and gkr's own
check (generator.policies.pod_problems, the same rule source) refuses the same pods."""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.admission import (
    NAMESPACE_NAME_LABEL,
    POLICY_NAME,
    Allowance,
    Sidecar,
    allowance,
    team_enforce_level,
)
from generator.catalog import Catalog
from generator.policies import pod_problems as gkr_problems
from generator.policies import pod_specs
from tests.platform.admission_cel import ROOTS, PolicyEvaluator

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ROOT / "kustomize/overlays"
PINNED = "registry.example/x@sha256:" + "a" * 64
Pod = dict[str, Any]


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@cache
def _policy(cluster: str) -> tuple[dict[str, Any], dict[str, Any]]:
    policy, binding = _documents(OVERLAYS / cluster / "platform/admission.yaml")
    return policy, binding


@cache
def _evaluator(cluster: str) -> PolicyEvaluator:
    return PolicyEvaluator(_policy(cluster)[0])


@cache
def _catalog() -> Any:
    return Catalog(ROOT)


def _committed_pods() -> list[tuple[str, str, Pod]]:
    """(cluster, where, pod) of every pod template in the committed jobs."""
    found = []
    for path in sorted(OVERLAYS.glob("*/jobs/*/*.yaml")):
        cluster = path.relative_to(OVERLAYS).parts[0]
        for document in _documents(path):
            for where, spec in pod_specs(document):
                found.append((cluster, f"{path.relative_to(ROOT)}:{document['kind']}:{where}",
                              {"apiVersion": "v1", "kind": "Pod", "spec": spec}))
    return found


COMMITTED = _committed_pods()


def test_every_cluster_overlay_has_the_policy_bound_to_its_team_namespaces() -> None:
    for cluster in _catalog().clusters.values():
        policy, binding = _policy(cluster.name)
        assert policy["kind"] == "ValidatingAdmissionPolicy"
        assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert binding["spec"]["policyName"] == POLICY_NAME
        assert binding["spec"]["validationActions"] == ["Deny"]
        (term,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert term["key"] == NAMESPACE_NAME_LABEL and term["operator"] == "In"
        assert term["values"] == sorted(t.namespace for t in cluster.teams.values())
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        assert {"pods", "pods/ephemeralcontainers"} <= {r for rule in rules
                                                        for r in rule["resources"]}


def test_expressions_use_only_the_roots_the_harness_provides() -> None:
    """The harness is faithful only for expressions over object/oldObject/params/variables
    (and the macros' own loop variables): every other free name is refused here."""
    strings = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
    free = re.compile(r"(?<![.\w])([A-Za-z_]\w*)\b(?!\s*\()")
    allowed = {*ROOTS, "c", "v", "p", "cap", "true", "false", "null", "in"}
    for cluster in _catalog().clusters:
        spec = _policy(cluster)[0]["spec"]
        for item in [*spec["variables"], *spec["validations"]]:
            names = set(free.findall(strings.sub('""', item["expression"])))
            assert names <= allowed, (item["expression"], names - allowed)


@pytest.mark.parametrize(("cluster", "where", "pod"), COMMITTED, ids=[w for _, w, _ in COMMITTED])
def test_every_committed_pod_is_admitted(cluster: str, where: str, pod: Pod) -> None:
    assert _evaluator(cluster).refusals(pod) == []


def test_the_committed_jobs_include_gpu_pods_with_host_paths_and_sidecars() -> None:
    """The admitted set is not trivially small: catalog host paths and a NET_ADMIN sidecar."""
    pods = [pod["spec"] for _, _, pod in COMMITTED]
    assert any(v.get("hostPath") for p in pods for v in p.get("volumes", []))
    assert any("NET_ADMIN" in ((c.get("securityContext") or {}).get("capabilities") or {})
               .get("add", []) for p in pods for c in p.get("initContainers", [])
               + p["containers"])


# -- hostile pods ----------------------------------------------------------------------------

def _gpu_pod(name: str = "tcpxo-daemon") -> tuple[str, Pod]:
    """A committed H100-Mega worker: catalog host paths and the TCPXO sidecar."""
    for cluster, _, pod in COMMITTED:
        containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
        if any(c["name"] == name for c in containers):
            return cluster, copy.deepcopy(pod)
    raise AssertionError(f"no committed pod has a {name} container")


def _cpu_pod() -> tuple[str, Pod]:
    for cluster, _, pod in COMMITTED:
        if "cloud.google.com/gke-accelerator" not in pod["spec"].get("nodeSelector", {}):
            return cluster, copy.deepcopy(pod)
    raise AssertionError("no committed CPU pod")


def _main(pod: Pod) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def _sidecar(pod: Pod) -> dict[str, Any]:
    spec = pod["spec"]
    return next(c for c in spec.get("initContainers", []) + spec["containers"]
                if c["name"] == "tcpxo-daemon")


def _privileged(pod: Pod) -> None:
    _main(pod)["securityContext"] = {"privileged": True}


def _privileged_init(pod: Pod) -> None:
    pod["spec"].setdefault("initContainers", []).append(
        {"name": "setup", "image": PINNED, "securityContext": {"privileged": True}})


def _privileged_ephemeral(pod: Pod) -> None:
    pod["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": PINNED, "securityContext": {"privileged": True}}]


def _host_path(path: str) -> Callable[[Pod], None]:
    def mutate(pod: Pod) -> None:
        pod["spec"].setdefault("volumes", []).append({"name": "host", "hostPath": {"path": path}})
    return mutate


def _capability(cap: str) -> Callable[[Pod], None]:
    def mutate(pod: Pod) -> None:
        _main(pod)["securityContext"] = {"capabilities": {"add": [cap]}}
    return mutate


def _sidecar_other_image(pod: Pod) -> None:
    _sidecar(pod)["image"] = PINNED  # same name, not the catalog's image: no NET_ADMIN


def _sidecar_extra_capability(pod: Pod) -> None:
    _sidecar(pod)["securityContext"]["capabilities"]["add"].append("SYS_ADMIN")


def _host_namespace(key: str) -> Callable[[Pod], None]:
    def mutate(pod: Pod) -> None:
        pod["spec"][key] = True
    return mutate


def _host_port(pod: Pod) -> None:
    _main(pod)["ports"] = [{"containerPort": 22, "hostPort": 22}]


def _seccomp_unconfined(pod: Pod) -> None:
    pod["spec"]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}


def _container_seccomp_unconfined(pod: Pod) -> None:
    _main(pod)["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}


def _proc_unmasked(pod: Pod) -> None:
    _main(pod)["securityContext"] = {"procMount": "Unmasked"}


def _unpinned(pod: Pod) -> None:
    _main(pod)["image"] = "ubuntu:latest"


def _sidecar_image_under_another_name(pod: Pod) -> None:
    _main(pod)["image"] = _sidecar(pod)["image"]  # a tag is allowed only for the sidecar


GPU_HOSTILE: dict[str, Callable[[Pod], None]] = {
    "privileged container": _privileged,
    "privileged init container": _privileged_init,
    "privileged ephemeral container": _privileged_ephemeral,
    "foreign hostPath /": _host_path("/"),
    "foreign hostPath docker socket": _host_path("/var/run/docker.sock"),
    "catalog path with ..": _host_path("/home/kubernetes/bin/nvidia/../../.."),
    "catalog path with a trailing slash": _host_path("/home/kubernetes/bin/nvidia/"),
    "capability SYS_ADMIN": _capability("SYS_ADMIN"),
    "capability NET_ADMIN outside the sidecar": _capability("NET_ADMIN"),
    "baseline's CHOWN (gkr adds none)": _capability("CHOWN"),
    "sidecar name with another image": _sidecar_other_image,
    "sidecar with an extra capability": _sidecar_extra_capability,
    "hostNetwork": _host_namespace("hostNetwork"),
    "hostPID": _host_namespace("hostPID"),
    "hostIPC": _host_namespace("hostIPC"),
    "hostPort": _host_port,
    "pod seccomp Unconfined": _seccomp_unconfined,
    "container seccomp Unconfined": _container_seccomp_unconfined,
    "procMount Unmasked": _proc_unmasked,
    "unpinned image": _unpinned,
    "sidecar's tagged image on another container": _sidecar_image_under_another_name,
}


def _gkr_refuses(pod: Pod, cluster: str) -> list[str]:
    """gkr's own check of the pod, with the accelerator its node selector names."""
    catalog = _catalog()
    wanted = pod["spec"].get("nodeSelector", {}).get("cloud.google.com/gke-accelerator")
    accelerator = next((a for a in catalog.accelerators.values()
                        if a.gke_accelerator == wanted), None)
    return gkr_problems(pod["spec"], accelerator, catalog.platform.telemetry.node_dir)


@pytest.mark.parametrize("mutate", GPU_HOSTILE.values(), ids=GPU_HOSTILE.keys())
def test_each_hostile_gpu_pod_is_refused_by_the_cluster_and_by_gkr(
        mutate: Callable[[Pod], None]) -> None:
    cluster, pod = _gpu_pod()
    assert _evaluator(cluster).refusals(pod) == [] and _gkr_refuses(pod, cluster) == []
    mutate(pod)
    assert _evaluator(cluster).refusals(pod), "the ValidatingAdmissionPolicy admitted it"
    assert _gkr_refuses(pod, cluster), "gkr validate admitted it"


@pytest.mark.parametrize("path", ["/home/kubernetes/bin/nvidia", "/var/lib/gkr/telemetry"])
def test_a_cpu_pod_mounts_no_host_path_not_even_the_catalogs(path: str) -> None:
    cluster, pod = _cpu_pod()
    _host_path(path)(pod)
    assert "host path" in " ".join(_evaluator(cluster).refusals(pod))


def test_a_gpu_pod_claiming_another_accelerator_loses_its_sidecar_grant() -> None:
    """NET_ADMIN is granted per accelerator: the same sidecar on H200 nodes is refused."""
    cluster, pod = _gpu_pod()
    pod["spec"]["nodeSelector"]["cloud.google.com/gke-accelerator"] = "nvidia-h200-141gb"
    assert any("capabilities" in m for m in _evaluator(cluster).refusals(pod))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.text(alphabet="/abcdeinvklrtsu._-", min_size=1, max_size=40))
def test_any_host_path_outside_the_catalog_is_refused(path: str) -> None:
    cluster, pod = _gpu_pod()
    allowed = set(pod_allowed_paths(cluster))
    _host_path(path)(pod)
    refused = bool(_evaluator(cluster).refusals(pod))
    assert refused == (path not in allowed)
    assert bool(_gkr_refuses(pod, cluster)) == (path not in allowed)


def pod_allowed_paths(cluster: str) -> list[str]:
    variables = {v["name"]: v["expression"] for v in _policy(cluster)[0]["spec"]["variables"]}
    return list(yaml.safe_load(variables["hostPathsByAccelerator"])["nvidia-h100-mega-80gb"])


# -- the Pod Security level ------------------------------------------------------------------

def test_team_namespaces_enforce_baseline_where_no_accelerator_needs_more() -> None:
    cpu_only = Allowance()
    assert team_enforce_level([]) == team_enforce_level([cpu_only]) == "baseline"
    assert team_enforce_level([Allowance((), {"s": Sidecar("i", ("CHOWN",))})]) == "baseline"
    assert team_enforce_level([Allowance(("/x",))]) == "privileged"
    assert team_enforce_level([Allowance((), {"s": Sidecar("i", ("NET_ADMIN",))})]) \
        == "privileged"


def test_catalog_gpu_pods_cannot_hold_baseline_so_the_policy_is_bound() -> None:
    """Every accelerator's pods mount host folders (baseline forbids hostPath volumes), so
    the committed team namespaces enforce privileged with the policy bound, and audit/warn
    baseline; the system namespace stays restricted."""
    catalog = _catalog()
    node_dir = catalog.platform.telemetry.node_dir
    assert all(allowance(a, node_dir).beyond_baseline for a in catalog.accelerators.values())
    for cluster in catalog.clusters.values():
        spaces = _documents(OVERLAYS / cluster.name / "platform/namespaces.yaml")
        teams = {t.namespace for t in cluster.teams.values()}
        for space in spaces:
            labels = space["metadata"]["labels"]
            if space["metadata"]["name"] in teams:
                assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
                assert labels["pod-security.kubernetes.io/audit"] == "baseline"
                assert labels["pod-security.kubernetes.io/warn"] == "baseline"
            else:
                assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
        assert _policy(cluster.name)[1]["spec"]["matchResources"]  # bound there


def test_a_ray_operator_namespace_other_than_the_addons_is_refused(tmp_path: Path) -> None:
    """Jobs' NetworkPolicies admit KubeRay from the catalog's namespace: a catalog that names
    another than the add-on runs in is refused, naming the file and field."""
    from generator.errors import InvalidInput
    from generator.render import render_tree

    for folder in ("clusters", "platform/catalog", "platform/warden", "jobs",
                   "terraform/modules"):
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, tmp_path / folder)
    gke = tmp_path / "platform/catalog/gke.yaml"
    gke.write_text(gke.read_text().replace("ray_operator_namespace: kuberay-system",
                                           "ray_operator_namespace: ray-elsewhere"))
    with pytest.raises(InvalidInput, match=r"ray_operator_namespace.*kuberay-system") as raised:
        render_tree(tmp_path, use_cache=False)
    assert "platform/catalog/gke.yaml" in str(raised.value)
