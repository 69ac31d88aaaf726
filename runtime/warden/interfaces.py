"""The narrow seams Warden acts through; real implementations live beside them.

Kubernetes objects cross these seams as plain JSON dicts (the API's own shapes), so the
real client and a test double exchange exactly what the API server would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from runtime.pods import CheckSuite
from runtime.warden.model import CheckResult

Json = dict[str, Any]
WorkloadKind = Literal["Job", "RayJob", "RayCluster"]  # what an owner submits and Warden drains


class Cluster(Protocol):
    """The Kubernetes API calls Warden needs (least privilege mirrors this list)."""

    def list_nodes(self, selector: str) -> list[Json]: ...
    def get_node(self, name: str) -> Json: ...
    def patch_node(self, name: str, patch: Json) -> Json: ...
    def node_events(self) -> list[Json]: ...  # of every node: one call per sweep
    def pods_on_node(self, name: str) -> list[Json]: ...
    def list_pods(self, selector: str) -> list[Json]: ...
    def evict(self, namespace: str, pod: str) -> None: ...
    def post_event(self, namespace: str, event: Json) -> None: ...
    def create_job(self, namespace: str, job: Json) -> Json: ...
    def get_job(self, namespace: str, name: str) -> Json: ...
    def job_pods(self, namespace: str, job: str) -> list[Json]: ...
    def get_raycluster(self, namespace: str, name: str) -> Json: ...
    def patch_raycluster(self, namespace: str, name: str, patch: Json) -> Json: ...
    def list_rayjobs(self) -> list[Json]: ...
    def annotate(self, kind: WorkloadKind, namespace: str, name: str,
                 annotations: dict[str, str]) -> None: ...  # NotFound when it is gone


class Telemetry(Protocol):
    """GPU telemetry: the per-node maximum of one metric over the node's GPUs."""

    def node_max(self, metric: str) -> dict[str, float]: ...


class CloudRepair(Protocol):
    """Cloud operations on the machine behind a node; `key` makes each call idempotent."""

    def reboot(self, provider_id: str, key: str) -> None: ...
    def request_repair(self, provider_id: str, key: str, reason: str) -> None: ...


class EventLog(Protocol):
    """Where Warden records what it did to a node (cordon, escalate, reboot, repair, uncordon,
    a phase it settles in), for people and the telemetry store; never raises."""

    def record(self, node: str, action: str, reason: str, message: str) -> None: ...


class NodeCheck(Protocol):
    """Run a check suite on one node; `name` identifies the run so a retry joins it."""

    def start(self, node: str, suite: CheckSuite, name: str) -> None: ...
    def result(self, name: str) -> CheckResult | None: ...


@dataclass(frozen=True, order=True)
class WorkloadRef:
    """The object an owner submitted (a batch Job, a RayJob, a RayCluster of their own)."""

    kind: WorkloadKind
    namespace: str
    name: str


@dataclass(frozen=True)
class DrainNotice:
    """What the owner of one workload is told before Warden evicts its pods on a node."""

    node: str
    reason: str  # why the node is faulty (its cordon reason)
    deadline: str  # RFC 3339, UTC: when the pods are evicted
    grace_s: float
    workload: WorkloadRef
    pods: tuple[str, ...]  # `namespace/name`, those on the node
    owner: str  # who submitted it (the generator's owner annotation); "" when unknown


class OwnerNotifier(Protocol):
    """One way of telling owners that their workloads are about to be drained (the notices
    of one drain of one node)."""

    def notify(self, notices: Sequence[DrainNotice]) -> None: ...
