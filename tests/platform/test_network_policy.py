"""In-cluster listeners closed to strangers (issue 22, point 3): every committed job has a
NetworkPolicy that admits its pods' ports from the job's own pods only, plus what a real
cluster needs (KubeRay and the submitter on the dashboard; a DiLoCo synchroniser's port
from its run and its load balancer's ranges). Evaluated over the committed manifests by
tests/platform/netpol.py; pods learn their IP (GKR_POD_IP) from the downward API."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.pods import DASHBOARD_PORT
from generator.policies import pod_specs
from runtime.aux.proxy import PORTS as AUX_PORTS
from runtime.identity import Env, Label
from tests.platform.netpol import Peer, admitted

ROOT = Path(__file__).resolve().parents[2]
JOBS = sorted((ROOT / "kustomize/overlays").glob("*/jobs/*/*.yaml"))
OPERATOR = Peer("kuberay-system", {"app.kubernetes.io/name": "kuberay-operator"})
# Ports the job's pods listen on: Ray's GCS and client, an aux proxy, and ports torchft and
# Ray pick at run time (Lighthouse, Manager, TCPStore, raylet, object manager).
INTERNAL_PORTS = (6379, 10001, AUX_PORTS[0], AUX_PORTS[1] - 1, 29500, 40123, 52365)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _policies(path: Path) -> list[dict[str, Any]]:
    return [d for d in _documents(path) if d["kind"] == "NetworkPolicy"]


def _pods(path: Path) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(namespace, labels, spec) of every pod template in the job's file."""
    found = []
    for document in _documents(path):
        namespace = document["metadata"]["namespace"]
        for where, spec in pod_specs(document):
            template = _at(document, where.rsplit(".", 1)[0])
            found.append((namespace, template["metadata"]["labels"], spec))
    return found


def _at(node: Any, path: str) -> Any:
    for part in path.replace("]", "").replace("[", ".").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


def _all_policies() -> list[dict[str, Any]]:
    return [p for path in JOBS for p in _policies(path)]


@pytest.fixture(params=JOBS, ids=[p.stem for p in JOBS])
def job(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


def test_each_job_has_one_policy_selecting_exactly_its_pods(job: Path) -> None:
    (policy,) = _policies(job)
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {Label.JOB: job.stem}}
    for namespace, labels, _ in _pods(job):
        assert admitted([policy], Peer(namespace, labels), Peer("elsewhere", {}), 1) is False


def test_own_pods_reach_every_listener(job: Path) -> None:
    policies = _all_policies()
    pods = _pods(job)
    for namespace, target, _ in pods:
        for _, source, _ in pods:
            for port in INTERNAL_PORTS:
                assert admitted(policies, Peer(namespace, target), Peer(namespace, source), port)


def test_another_jobs_pods_are_not_admitted(job: Path) -> None:
    """Another job's pods, of the same namespace or another, reach no port of this job,
    except a DiLoCo part of the same run on the synchroniser's own port."""
    policies = _all_policies()
    for other in JOBS:
        if other == job:
            continue
        for namespace, target, _ in _pods(job):
            exposed = _exposed_ports(job)
            for other_namespace, source, _ in _pods(other):
                same_run = Label.RUN in target and source.get(Label.RUN) == target.get(Label.RUN)
                for port in (*INTERNAL_PORTS, DASHBOARD_PORT, *exposed):
                    allowed = same_run and port in exposed and other_namespace == namespace
                    assert admitted(policies, Peer(namespace, target),
                                    Peer(other_namespace, source), port) is allowed, \
                        (other.stem, job.stem, port)


def test_same_labels_in_another_namespace_are_strangers(job: Path) -> None:
    policies = _all_policies()
    for namespace, labels, _ in _pods(job):
        impostor = Peer(f"{namespace}-x", dict(labels))
        assert not any(admitted(policies, Peer(namespace, labels), impostor, port)
                       for port in (*INTERNAL_PORTS, DASHBOARD_PORT))


def _exposed_ports(path: Path) -> tuple[int, ...]:
    return tuple(p["targetPort"] for d in _documents(path) if d["kind"] == "Service"
                 for p in d["spec"]["ports"])


def _heads(path: Path) -> list[tuple[str, dict[str, str]]]:
    return [(ns, labels) for ns, labels, _ in _pods(path) if labels.get(Label.ROLE) == "head"]


def test_the_ray_head_admits_kuberay_and_its_submitter_on_the_dashboard_only() -> None:
    policies = _all_policies()
    rayjobs = [p for p in JOBS if _documents(p)[0]["kind"] == "RayJob"]
    assert rayjobs
    for path in rayjobs:
        ((namespace, head),) = _heads(path)
        submitter = Peer(namespace, {"batch.kubernetes.io/job-name": path.stem})
        assert admitted(policies, Peer(namespace, head), submitter, DASHBOARD_PORT)
        assert admitted(policies, Peer(namespace, head), OPERATOR, DASHBOARD_PORT)
        for port in INTERNAL_PORTS:
            assert not admitted(policies, Peer(namespace, head), submitter, port)
            assert not admitted(policies, Peer(namespace, head), OPERATOR, port)
        other = Peer(namespace, {"batch.kubernetes.io/job-name": f"{path.stem}-other"})
        assert not admitted(policies, Peer(namespace, head), other, DASHBOARD_PORT)


def test_the_diloco_synchroniser_admits_its_run_and_its_load_balancer_ranges() -> None:
    policies = _all_policies()
    exposed = [p for p in JOBS if _exposed_ports(p)]
    assert exposed
    for path in exposed:
        (service,) = [d for d in _documents(path) if d["kind"] == "Service"]
        ((namespace, labels, _),) = _pods(path)
        target = Peer(namespace, labels)
        (port,) = _exposed_ports(path)
        for cidr in service["spec"].get("loadBalancerSourceRanges", []):
            inside = str(next(iter(ipaddress.ip_network(cidr).hosts())))
            assert admitted(policies, target, Peer(ip=inside), port)
            assert not admitted(policies, target, Peer(ip=inside), AUX_PORTS[0])
        assert not admitted(policies, target, Peer(ip="203.0.113.9"), port)
        learner = Peer(namespace, {Label.RUN: labels[Label.RUN], Label.JOB: "some-learner"})
        assert admitted(policies, target, learner, port)


def test_every_pod_learns_its_ip_from_the_downward_api(job: Path) -> None:
    for _, _, spec in _pods(job):
        for container in spec["containers"]:
            if container["name"] == "sentinel":
                continue  # the sentinel listens on nothing
            env = {e["name"]: e for e in container.get("env", [])}
            assert env[Env.POD_IP]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
