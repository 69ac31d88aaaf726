"""Auto-shrink (seed §7.2): a dropped replica group's pods go, so the RayCluster gets smaller.

When a group drops out of the quorum, the fault-tolerance controller (rank 0 of the
lowest-index group still in the quorum) asks Warden to lower the RayCluster's worker group by
the pods only that group used, naming them, so that KubeRay reconciles the smaller allocation
instead of waiting for pods that are gone; training does not wait for the answer. One request
per drop: only that controller asks, once per quorum change it sees, and the request id is
made of the run, the group and the quorum, so a repeat (from a controller that took over)
is applied once by Warden's idempotent shrink workflow.

Requests go through Warden's public API (`runtime.warden.view.request_shrink`) when a Warden
is configured; a local run has none, and the run's `Board` (hosted by the driver) records
them instead, where the driver and tests read them back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import ray

from runtime.ft.config import FaultToleranceConfig
from runtime.identity import Env, Identity
from runtime.warden.model import ShrinkOutcome, ShrinkRequest

# KubeRay sets this on every container of a RayCluster (Ray's own dashboard reads it to find
# its cluster: python/ray/dashboard/modules/.../k8s event export, "set by KubeRay Operator").
RAYCLUSTER_ENV = "RAY_CLUSTER_NAME"


@dataclass(frozen=True)
class Drop:
    """A replica group the quorum lost."""

    group: int
    quorum: int  # the id of the first quorum without it
    step: int  # the committed step the survivors were at


class ShrinkTarget(Protocol):
    """Where shrink requests go: Warden, or the run's record of them (a local run)."""

    def request(self, request: ShrinkRequest) -> ShrinkOutcome: ...


class WardenShrink:
    """Warden's shrink workflow on Temporal, through Warden's public API."""

    def __init__(self, address: str, namespace: str, task_queue: str) -> None:
        self.address, self.namespace, self.task_queue = address, namespace, task_queue

    def request(self, request: ShrinkRequest) -> ShrinkOutcome:
        """Start (or join) the request's workflow and wait for its outcome."""
        from runtime.warden.view import Where, request_shrink  # Temporal only when used

        where = Where(self.address, self.namespace)
        return asyncio.run(request_shrink(where, request, self.task_queue))


class RecordedShrink:
    """The run's Board stands in for Warden: it records the request and answers like Warden."""

    def __init__(self, board: Any) -> None:
        self.board = board

    def request(self, request: ShrinkRequest) -> ShrinkOutcome:
        """Record the request; applied once per request id, as Warden would."""
        outcome: ShrinkOutcome = ray.get(self.board.shrink.remote(request))
        return outcome


def shrink_target(config: FaultToleranceConfig, board: Any) -> ShrinkTarget:
    """Warden when one is configured (the section, else the pod's Temporal address, from
    the identity module's environment), else the Board's record."""
    address = config.warden_address or os.environ.get(Env.TEMPORAL_ADDRESS)
    if not address:
        return RecordedShrink(board)
    namespace = os.environ.get(Env.TEMPORAL_NAMESPACE) or config.warden_namespace
    return WardenShrink(address, namespace, config.warden_task_queue)


def shrink_request(run_id: str, drop: Drop, pods: Mapping[int, set[str]],
                   config: FaultToleranceConfig, identity: Identity) -> ShrinkRequest:
    """The request for `drop`: the pods only the dropped group used (a pod shared with a
    live group stays). A local run knows no pods and asks to remove none."""
    others = set().union(*(names for group, names in pods.items() if group != drop.group))
    doomed = sorted(pods.get(drop.group, set()) - others)
    cluster = os.environ.get(RAYCLUSTER_ENV) or identity.job or run_id
    return ShrinkRequest(
        request_id=f"{run_id}-g{drop.group}-q{drop.quorum}", namespace=identity.namespace,
        cluster=cluster, group=config.worker_group, remove=len(doomed),
        workers_to_delete=doomed,
    )


class Board:
    """The run's fault-tolerance record, a small actor in the driver: each group's pods, the
    shrink requests made (every call, so a test can count them), and whether the run has
    finished or why it stopped."""

    def __init__(self) -> None:
        self.pods: dict[int, dict[int, str]] = {}
        self.requests: list[ShrinkRequest] = []
        self.applied: set[str] = set()
        self.stop_reason: str | None = None
        self.finished = False

    def register(self, group: int, rank: int, pod: str) -> None:
        """A rank of `group` runs in `pod` (a replacement overwrites its predecessor)."""
        self.pods.setdefault(group, {})[rank] = pod

    def pods_by_group(self) -> dict[int, set[str]]:
        """The pods of every group, without unknown ones (a local run's)."""
        return {g: {p for p in ranks.values() if p} for g, ranks in self.pods.items()}

    def shrink(self, request: ShrinkRequest) -> ShrinkOutcome:
        """Record a request; like Warden, apply each request id once."""
        self.requests.append(request)
        applied = request.request_id not in self.applied
        self.applied.add(request.request_id)
        return ShrinkOutcome(replicas=-1, applied=applied)  # no RayCluster to count

    def shrinks(self) -> list[ShrinkRequest]:
        """Every request made, in order."""
        return list(self.requests)

    def stop(self, reason: str) -> None:
        """The run cannot go on (too few replica groups); the first reason is kept. A group
        that waited in vain after the run finished (a late replacement) stops nothing."""
        if not self.finished:
            self.stop_reason = self.stop_reason or reason

    def stopped(self) -> str | None:
        """Why the run stopped, or None."""
        return self.stop_reason

    def finish(self) -> None:
        """A group committed the run's last step."""
        self.finished = True

    def over(self) -> bool:
        """Whether the run finished or stopped (a replacement arriving now has nothing to
        do)."""
        return self.finished or self.stop_reason is not None


def board_name(run_id: str) -> str:
    """The named-actor name of a run's Board."""
    return f"gkr-ft-{run_id}"


def start_board(run_id: str) -> Any:
    """Start the run's Board (no CPU reserved)."""
    return ray.remote(num_cpus=0)(Board).options(name=board_name(run_id)).remote()
