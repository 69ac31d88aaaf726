"""The additional node networks of each cluster: the VPCs and subnets Terraform makes for its
GPU node pools (generator.platform.terraform), and the Network and GKENetworkParamSet pair
that every network a pod's `networking.gke.io/interfaces` names needs in the cluster (the
overlay's platform/networks.yaml).

Their fields follow GKE's CRDs (github.com/GoogleCloudPlatform/gke-networking-api,
config/crds/networking.gke.io_networks.yaml and networking.gke.io_gkenetworkparamsets.yaml;
vendored in generator/schemas/crds) and GKE's examples: a Network of type Device per GPU NIC
with deviceMode NetDevice for TCPX/TCPXO
(https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx), and
for RDMA machines `gvnic-1` as NetDevice and `rdma-0`… as RDMA, the RDMA ones subnets of one
VPC (https://cloud.google.com/ai-hypercomputer/docs/networking-services).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from generator.catalog import (
    AcceleratorPool,
    Catalog,
    Cluster,
    DeviceMode,
    NetworkLayout,
    NetworkStack,
)
from generator.errors import InvalidInput, Problem
from generator.manifests import render_documents

GVNIC_DEVICE_MODE: DeviceMode = "NetDevice"  # a kernel network device, on a regular VPC


@dataclass(frozen=True)
class NodeNetwork:
    """One additional node network: a subnet, of a VPC of its own or of the RoCE VPC."""

    layout: NetworkLayout
    mtu: int
    vpc: str
    subnet: str
    device_mode: DeviceMode

    def terraform(self) -> dict[str, Any]:
        """What the gke-cluster module's `node_networks` holds of it."""
        return {k: v for k, v in asdict(self).items() if k != "device_mode"}


def node_networks(catalog: Catalog, cluster: Cluster) -> dict[str, NodeNetwork]:
    """Every node network of the cluster's pools by name; pools naming one network must
    mean the same network by it."""
    networks: dict[str, NodeNetwork] = {}
    problems = []
    for name, pool in sorted(cluster.accelerators.items()):
        stack = catalog.network_stack(catalog.accelerators[name])
        for network, wanted in _pool_networks(cluster, pool, stack):
            if networks.setdefault(network, wanted) != wanted:
                problems.append(Problem(
                    f"clusters/{cluster.name}.yaml", None, f"accelerators.{name}",
                    f"network {network!r} is named by another pool for another kind of NIC "
                    "(gVNIC, or another GPUDirect stack); name it apart"))
    if problems:
        raise InvalidInput(problems)
    return dict(sorted(networks.items()))


def _pool_networks(
    cluster: Cluster, pool: AcceleratorPool, stack: NetworkStack | None
) -> Iterator[tuple[str, NodeNetwork]]:
    if stack is None:
        return
    if pool.gvnic_network:
        own = f"{cluster.name}-{pool.gvnic_network}"
        yield pool.gvnic_network, NodeNetwork("vpc_per_nic", stack.mtu, own, own,
                                              GVNIC_DEVICE_MODE)
    for network in pool.gpu_networks:
        subnet = f"{cluster.name}-{network}"
        vpc = f"{cluster.name}-roce" if stack.layout == "roce_vpc" else subnet
        yield network, NodeNetwork(stack.layout, stack.mtu, vpc, subnet, stack.device_mode)


def network_objects(catalog: Catalog, cluster: Cluster) -> list[dict[str, Any]]:
    """The Network and GKENetworkParamSet of every node network of the cluster."""
    return render_documents("platform/networks.yaml.j2", networks=node_networks(catalog, cluster))
