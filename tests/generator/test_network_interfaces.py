"""The NIC layout GKE gives each GPUDirect stack, in rendered pods and in the catalog's rules.

GKE's contract (shared/reference/accelerators.md; xpk rdma/tcpxo decorators): an RDMA
machine (A3 Ultra, A4, A4X) has eth0 on `default`, a gVNIC eth1, then its RDMA NICs from
eth2; a TCPX/TCPXO machine has its GPU NICs from eth1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from generator.catalog import Catalog
from generator.errors import InvalidInput
from generator.render import render_tree

CLUSTER = "clusters/all-accelerators.yaml"
ACCELERATORS = "platform/catalog/accelerators.yaml"
INTERFACES = "networking.gke.io/interfaces"
RDMA = [("eth1", "gvnic-1"), *((f"eth{i + 2}", f"rdma-{i}") for i in range(8))]


def _annotations(node: Any) -> Iterator[dict[str, str]]:
    """Every metadata.annotations under a manifest (the object's and its pod templates')."""
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict):
            yield node["metadata"].get("annotations") or {}
        for value in node.values():
            yield from _annotations(value)
    elif isinstance(node, list):
        for value in node:
            yield from _annotations(value)


def _interfaces(repo, spec, accelerator: str) -> list[tuple[str, str]]:
    """The (interface, network) pairs of the GPU pods of a job rendered on `accelerator`."""
    name = f"nics-{accelerator.lower()}"
    repo.write_spec(name, spec(name=name, kind="job", pods=1, accelerator=accelerator))
    tree = render_tree(repo.root, use_cache=False)
    documents = tree.manifests[f"kustomize/overlays/all-accelerators/jobs/team-ml/{name}.yaml"]
    found = {a[INTERFACES] for d in documents for a in _annotations(d) if INTERFACES in a}
    (annotation,) = found
    return [(nic["interfaceName"], nic["network"]) for nic in json.loads(annotation)]


@pytest.mark.parametrize("accelerator", ["H200", "B200"])
def test_an_rdma_pod_has_eth0_to_eth9_with_the_gvnic_on_eth1(repo, spec, accelerator) -> None:
    assert _interfaces(repo, spec, accelerator) == [("eth0", "default"), *RDMA]


def test_a_tcpxo_pod_keeps_its_eight_gpu_nics_on_eth1_to_eth8(repo, spec) -> None:
    expected = [("eth0", "default"), *((f"eth{i}", f"vpc-{i}") for i in range(1, 9))]
    assert _interfaces(repo, spec, "H100-Mega") == expected


def _add_a4x(repo) -> None:
    """A GB200 (A4X: 4 GPUs, 4 RDMA NICs) beside the H200 it copies, and a pool of it."""
    path = repo.root / ACCELERATORS
    catalog = yaml.safe_load(path.read_text())
    gb200 = {**catalog["accelerators"]["H200"], "gke_accelerator": "nvidia-gb200",
             "machine_type": "a4x-highgpu-4g", "gpus_per_node": 4, "gpu_nics": 4}
    catalog["accelerators"]["GB200"] = gb200
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    cluster_path = repo.root / CLUSTER
    cluster = yaml.safe_load(cluster_path.read_text())
    cluster["accelerators"]["GB200"] = {
        "node_pool": "a4x", "nodes": 2, "zone": "us-central1-a",
        "reservation": "projects/gkr-test/reservations/a4x", "gvnic_network": "gvnic-1",
        "gpu_networks": [f"rdma-{i}" for i in range(4)]}
    cluster_path.write_text(yaml.safe_dump(cluster, sort_keys=False))


def test_an_a4x_pod_has_eth0_to_eth5(repo, spec) -> None:
    _add_a4x(repo)
    assert _interfaces(repo, spec, "GB200") == [("eth0", "default"), *RDMA[:5]]


def _cluster_problems(repo, old: str, new: str) -> list[tuple[str, str]]:
    path = repo.root / CLUSTER
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InvalidInput) as raised:
        _ = Catalog(repo.root).clusters
    assert {p.file for p in raised.value.problems} == {CLUSTER}
    assert all(p.line for p in raised.value.problems)
    return [(p.field, p.message) for p in raised.value.problems]


def test_an_rdma_pool_with_eight_networks_but_no_gvnic_is_refused(repo) -> None:
    """The layout GKR used to render (eth1…eth8 all RDMA) is a catalog error now."""
    problems = _cluster_problems(repo, "    gvnic_network: gvnic-1\n", "")
    assert [field for field, _ in problems] == ["accelerators.H200.gvnic_network"]
    assert "gVNIC eth1" in problems[0][1] and "gvnic-1" in problems[0][1]


def test_the_gvnic_listed_among_the_gpu_networks_is_refused(repo) -> None:
    problems = dict(_cluster_problems(
        repo, "    gvnic_network: gvnic-1\n    gpu_networks: [rdma-0",
        "    gpu_networks: [gvnic-1, rdma-0"))
    assert set(problems) == {"accelerators.H200.gvnic_network", "accelerators.H200.gpu_networks"}
    assert "8 GPU NICs (eth2…eth9): list exactly 8 networks" in problems[
        "accelerators.H200.gpu_networks"]


def test_a_gvnic_on_a_tcpxo_pool_is_refused(repo) -> None:
    problems = _cluster_problems(repo, "    gpu_networks: [vpc-1, vpc-2, vpc-3, vpc-4, vpc-5",
                                 "    gvnic_network: gvnic-1\n    gpu_networks: [vpc-1, vpc-2, "
                                 "vpc-3, vpc-4, vpc-5")
    assert problems == [("accelerators.H100-Mega.gvnic_network",
                         "H100-Mega nodes have no gVNIC besides eth0: drop it")]


def test_one_network_on_two_interfaces_is_refused(repo) -> None:
    problems = _cluster_problems(repo, "gpu_networks: [rdma-0, rdma-1,",
                                 "gpu_networks: [rdma-0, gvnic-1,")
    assert problems == [("accelerators.H200", "network 'gvnic-1' is named twice: each "
                         "interface needs its own network ('default' is eth0's)")]


def test_nccl_sockets_go_over_the_host_interfaces_of_each_stack(repo) -> None:
    """NCCL_SOCKET_IFNAME names eth0, and the gVNIC eth1 on RDMA machines (never a GPU NIC)."""
    catalog = Catalog(repo.root)
    wanted = {"tcpx": "eth0", "tcpxo": "eth0", "rdma": "eth0,eth1"}
    for accelerator in catalog.accelerators.values():
        if accelerator.stack:
            assert accelerator.env["NCCL_SOCKET_IFNAME"] == wanted[accelerator.stack]
    path = repo.root / ACCELERATORS
    text = path.read_text()
    path.write_text(text.replace("NCCL_SOCKET_IFNAME: eth0,eth1", "NCCL_SOCKET_IFNAME: eth0", 1))
    with pytest.raises(InvalidInput) as raised:
        _ = Catalog(repo.root).accelerators
    (problem,) = raised.value.problems
    assert problem.file == ACCELERATORS
    assert problem.field == "accelerators.H200.env.NCCL_SOCKET_IFNAME"
    assert "host interfaces of rdma nodes are eth0,eth1" in problem.message
