"""What `gkr list` and `gkr status` report: phases, pods and nodes, pending reasons, admission.

Pure functions from the objects the API serves (dicts) to frozen rows; `job_status` and
`list_jobs` fetch them through `runtime.kube.Kube`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from generator.cluster.jobs import connect
from generator.cluster.target import Asked, find_cluster
from generator.kinds import KINDS
from runtime.identity import Annotation, Label, Role, selector
from runtime.kube import POD, RAYCLUSTER, RAYJOB, WORKLOAD, Kind, Kube, KubeError, NotFound, Obj
from runtime.preflight.result import GateRecord
from runtime.sentinel import last_report

MANAGED = "app.kubernetes.io/managed-by=gkr"
REPORT_LINES = 200  # of a sentinel's log: its report lines come at least every 5 minutes


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PodRow(_Row):
    name: str
    role: str
    phase: str
    node: str
    restarts: int
    reason: str


class JobRow(_Row):
    name: str
    kind: str
    namespace: str
    phase: str
    created: datetime | None
    owner: str


class JobStatus(_Row):
    name: str
    kind: str
    namespace: str
    phase: str
    created: datetime | None
    admission: str
    pods: list[PodRow]
    pending: list[str]
    sentinel: dict[str, Any] | None = None
    """A RayCluster's: its sentinel's latest report (runtime.sentinel.HeadReport)."""
    preflight: GateRecord | None = None
    """A RayJob's: the preflight gate's latest result, as Warden recorded it."""


def created(obj: Obj) -> datetime | None:
    """When the API server created the object (its RFC 3339 creationTimestamp)."""
    stamp = obj.get("metadata", {}).get("creationTimestamp")
    if not stamp:
        return None
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    conditions = obj.get("status", {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def _true(obj: Obj, kind: str) -> bool:
    return (_condition(obj, kind) or {}).get("status") == "True"


def phase(kind: Kind, obj: Obj) -> str:
    """The phase a researcher cares about, from the status the controllers write."""
    status = obj.get("status") or {}
    if kind == RAYJOB:
        deployment = status.get("jobDeploymentStatus") or "New"
        job = status.get("jobStatus")
        return f"{deployment}/{job}" if job else deployment
    if kind == RAYCLUSTER:
        return status.get("state") or "pending"
    for condition in ("Complete", "Failed", "Suspended"):
        if _true(obj, condition):
            return condition
    return "Running" if status.get("active") else "Pending"


def pod_row(pod: Obj) -> PodRow:
    status, labels = pod.get("status") or {}, pod["metadata"].get("labels") or {}
    containers = status.get("containerStatuses") or []
    waiting = [c["state"]["waiting"].get("reason", "") for c in containers
               if (c.get("state") or {}).get("waiting")]
    reason = waiting[0] if waiting else status.get("reason", "")
    if not reason and (unscheduled := _condition(pod, "PodScheduled")):
        reason = unscheduled.get("reason", "") if unscheduled.get("status") == "False" else ""
    return PodRow(
        name=pod["metadata"]["name"], role=labels.get(Label.ROLE, "?"),
        phase=status.get("phase", "Pending"), node=pod.get("spec", {}).get("nodeName") or "-",
        restarts=sum(c.get("restartCount", 0) for c in containers), reason=reason,
    )


def admission(workloads: list[Obj], owner: str) -> str:
    """Kueue's word on the job: admitted, or why not (the QuotaReserved message)."""
    mine = [w for w in workloads
            if any(ref.get("name") == owner for ref in w["metadata"].get("ownerReferences", []))]
    if not mine:
        return "no Kueue workload"
    workload = mine[0]
    if _true(workload, "Evicted"):
        return f"evicted: {_condition(workload, 'Evicted').get('message', '')}"  # type: ignore[union-attr]
    if _true(workload, "Admitted"):
        return "admitted"
    reserved = _condition(workload, "QuotaReserved") or {}
    return f"pending: {reserved.get('message') or 'waiting for quota'}"


def pending_reasons(events: list[Obj], names: set[str]) -> list[str]:
    """Warning events of the job and its pods, latest last, one line per reason and object."""
    seen: dict[tuple[str, str], str] = {}
    ordered = sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    for event in ordered:
        target = event.get("involvedObject", {}).get("name", "")
        if event.get("type") == "Warning" and target in names:
            seen[(target, event.get("reason", ""))] = event.get("message", "")
    return [f"{target}: {reason}: {message}" for (target, reason), message in seen.items()]


def preflight_record(obj: Obj) -> GateRecord | None:
    """The preflight result Warden recorded on a RayJob, if any; one that does not parse
    (another tool wrote the annotation) counts as none."""
    text = (obj.get("metadata", {}).get("annotations") or {}).get(Annotation.PREFLIGHT)
    if not text:
        return None
    try:
        return GateRecord.model_validate_json(text)
    except ValidationError:
        return None


def preflight_line(record: GateRecord) -> str:
    """One line of a gate's result: verdict, attempt, what the job does, what was measured."""
    verdict = "PASSED" if record.passed else "FAILED"
    return (f"{verdict} (attempt {record.attempt}/{record.attempts}, {record.at}; "
            f"next: {record.next}): {record.message}")


def job_status(api: Kube, namespace: str, name: str) -> JobStatus:
    """The status of a gkr job of any kind; NotFound when none has that name."""
    for kind in top_level(api):
        obj = api.find(kind, name, namespace=namespace)
        if obj is not None:
            return _status(api, kind, obj)
    raise NotFound(f"no rayjob, raycluster or job named {name!r} in namespace {namespace}")


def _status(api: Kube, kind: Kind, obj: Obj) -> JobStatus:
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    listed = api.list(POD, namespace=namespace, labels=selector(job=name))
    pods = [pod_row(p) for p in listed]
    events = api.events(namespace=namespace)
    try:
        workloads = api.list(WORKLOAD, namespace=namespace)
    except NotFound:  # Kueue not installed: nothing to say about admission
        workloads = []
    return JobStatus(
        name=name, kind=kind.kind, namespace=namespace, phase=phase(kind, obj),
        created=created(obj), admission=admission(workloads, name), pods=pods,
        pending=pending_reasons(events, {name} | {p.name for p in pods}),
        sentinel=sentinel_report(api, listed) if kind == RAYCLUSTER else None,
        preflight=preflight_record(obj) if kind == RAYJOB else None,
    )


def sentinel_report(api: Kube, pods: list[Obj]) -> dict[str, Any] | None:
    """The latest report in the log of the RayCluster's running sentinel (None: no sentinel
    running, or no report yet)."""
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(Label.ROLE) != Role.SENTINEL or pod_row(pod).phase != "Running":
            continue
        try:
            lines = list(api.logs(pod["metadata"]["name"], namespace=pod["metadata"]["namespace"],
                                  tail=REPORT_LINES))
        except KubeError:  # a log the kubelet cannot serve now: nothing to show
            return None
        return last_report(lines)
    return None


def top_level(api: Kube) -> list[Kind]:
    """The objects gkr applies for each job kind."""
    return [api.kind(t.api_version, t.object_kind) for t in KINDS.values()]


def list_jobs(api: Kube, namespaces: list[str]) -> list[JobRow]:
    rows = []
    for namespace in namespaces:
        for kind in top_level(api):
            for obj in api.list(kind, namespace=namespace, labels=MANAGED):
                rows.append(JobRow(
                    name=obj["metadata"]["name"], kind=kind.kind, namespace=namespace,
                    phase=phase(kind, obj), created=created(obj),
                    owner=(obj["metadata"].get("annotations") or {}).get(Annotation.OWNER, ""),
                ))
    return sorted(rows, key=lambda r: (r.namespace, r.name))


@dataclass(frozen=True)
class Listed:
    """`gkr list`: the jobs gkr submitted to one cluster's namespaces."""

    cluster: str
    namespaces: list[str]
    rows: list[JobRow]


def list_in(asked: Asked) -> Listed:
    """The jobs in `asked.namespace`, else in every team namespace of the cluster meant."""
    _, found = find_cluster(asked)
    namespaces = ([asked.namespace] if asked.namespace
                  else sorted(t.namespace for t in found.teams.values()))
    return Listed(found.name, namespaces, list_jobs(Kube.connect(found.kube_context), namespaces))


def status_of(asked: Asked) -> JobStatus:
    """`gkr status NAME`: the status of the job meant (generator.cluster.target)."""
    target, api = connect(asked)
    return job_status(api, target.namespace, str(asked.job))
