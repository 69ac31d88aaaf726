"""Where the gate's results go: to Warden, through its public API (runtime.warden.view).

Job pods hold no Kubernetes credentials (runtime.pods: automountServiceAccountToken false),
so the gate asks Warden, over Temporal, to record each result on the RayJob (the annotation
`gkr status` reads), to check the nodes it blames (suspects: Warden's node check decides),
and, for a retry, to replace the blamed pods (a shrink request that removes none: KubeRay
deletes the pods `workersToDelete` names even when the replicas stay, then recreates them to
keep the count; ray-operator reconcilePods, "Prioritize WorkersToDelete", ray-project/kuberay
pull request 208). Without a Warden
(no GKR_TEMPORAL_ADDRESS: a local run) results only go to the log, and nothing can replace
a pod, so a failed preflight tears the job down.
"""

from __future__ import annotations

import asyncio
import os
from typing import Protocol

from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Env, Identity
from runtime.kube import Unreachable
from runtime.preflight.result import GateRecord

REPLACE_TIMEOUT_S = 120.0  # how long Warden may take to accept a replacement request


class Reporter(Protocol):
    """Where results go, and whether pods can be replaced."""

    can_replace: bool

    def record(self, record: GateRecord) -> None:
        """Record one result; never raises (the gate goes on without a record)."""
        ...

    def replace(self, group: str, pods: list[str], attempt: int) -> bool:
        """Have these pods replaced; False when that was refused or not confirmed in time."""
        ...


def log(line: str) -> None:
    """A line of the driver's log (`gkr logs NAME` shows it), at once."""
    print(f"preflight: {line}", flush=True)


class LogReporter:
    """No Warden: results in the log only."""

    can_replace = False

    def record(self, record: GateRecord) -> None:
        log(record.model_dump_json())

    def replace(self, group: str, pods: list[str], attempt: int) -> bool:
        return False


class WardenReporter:
    """Warden on Temporal, through `runtime.warden.view` (imported when used: Temporal's
    client is slow to import)."""

    can_replace = True

    def __init__(self, address: str, namespace: str, task_queue: str, identity: Identity,
                 run_id: str, raycluster: str) -> None:
        self.address, self.namespace, self.task_queue = address, namespace, task_queue
        self.identity, self.run_id, self.raycluster = identity, run_id, raycluster

    def record(self, record: GateRecord) -> None:
        from temporalio.exceptions import TemporalError

        from runtime.warden.model import PreflightReport
        from runtime.warden.view import Where, report_preflight

        log(record.model_dump_json())
        report = PreflightReport(
            # One report per attempt and outcome: a teardown that follows a refused
            # replacement is a report of its own, not a repeat of the retry's.
            report_id=f"{self.run_id}-{record.attempt}-{record.next}",
            namespace=self.identity.namespace,
            kind="RayJob", name=self.identity.job, record=record.model_dump_json(),
            suspects={s.node: f"{s.pod}: {s.reason}" for s in record.suspects})
        try:
            asyncio.run(report_preflight(Where(self.address, self.namespace), report,
                                         self.task_queue))
        except (Unreachable, TemporalError) as error:  # the log still holds the result
            log(f"Warden not told ({error}); the result is only in this log")

    def replace(self, group: str, pods: list[str], attempt: int) -> bool:
        from temporalio.exceptions import TemporalError

        from runtime.warden.model import ShrinkRequest
        from runtime.warden.view import Where, request_shrink

        request = ShrinkRequest(
            request_id=f"{self.run_id}-replace-{attempt}", namespace=self.identity.namespace,
            cluster=self.raycluster, group=group, remove=0, workers_to_delete=pods)
        where = Where(self.address, self.namespace)
        try:
            asyncio.run(asyncio.wait_for(request_shrink(where, request, self.task_queue),
                                         REPLACE_TIMEOUT_S))
        except (Unreachable, TemporalError, TimeoutError) as error:  # a refusal, or no answer
            log(f"Warden did not replace {', '.join(pods)}: {error}")
            return False
        return True


def reporter_from_env(task_queue: str, run_id: str) -> Reporter:
    """Warden when the pod names its Temporal frontend (GKR_TEMPORAL_*), else the log."""
    from runtime.ft.shrink import RAYCLUSTER_ENV  # KubeRay's name of this pod's RayCluster

    address = os.environ.get(Env.TEMPORAL_ADDRESS)
    if not address:
        return LogReporter()
    namespace = os.environ.get(Env.TEMPORAL_NAMESPACE, WARDEN_TEMPORAL_NAMESPACE)
    return WardenReporter(address, namespace, task_queue, Identity.from_env(), run_id,
                          os.environ.get(RAYCLUSTER_ENV, ""))
