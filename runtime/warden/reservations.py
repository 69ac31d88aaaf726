"""Relaunch reservations (paper §4.3), decided from plain Kubernetes objects: no I/O here.

A RayJob annotated `Annotation.RELAUNCH_RESERVATION_SECONDS` (`gkr render` writes it from the
job's `relaunch_reservation`) keeps its former nodes for its namespace after it ends. While
its workers run, each of their nodes is *tracked*: two node annotations name the job and the
duration, so the claim outlives a Warden restart and the RayJob's deletion after its TTL.
Once the job has finished and its worker pods are gone, tracking turns into a *reservation*:
the taint `<taint_key>=<namespace>:NoSchedule` (every pod `gkr render` makes tolerates its
own namespace's) and the annotations below, written in one patch. When the reservation
expires, Warden removes exactly that taint and those annotations.

Every patch carries the node's `resourceVersion`, so the API server refuses it if the node
changed since it was read (a cordon, another Warden replica); the next sweep decides again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runtime.identity import Annotation, JobKind, Label, Role, selector

Json = dict[str, Any]

REQUEST = Annotation.RELAUNCH_RESERVATION_SECONDS  # on the RayJob
TRACKED_JOB = Annotation.RESERVATION_JOB  # on a node running a worker: `<ns>/<name>`
TRACKED_SECONDS = Annotation.RESERVATION_SECONDS  # the requested duration, beside it
UNTIL = Annotation.RESERVED_UNTIL
BY = Annotation.RESERVED_BY
FINISHED = frozenset({"Complete", "Failed"})  # KubeRay's terminal jobDeploymentStatus
EFFECT = "NoSchedule"

# Labels `gkr render` puts on a RayJob's worker pods (generator/templates, pod labels).
JOB_LABEL = Label.JOB
WORKER_SELECTOR = selector(kind=JobKind.RAYJOB, role=Role.WORKER)


@dataclass(frozen=True)
class Reservation:
    """A reservation Warden holds on a node."""

    namespace: str
    until: float | None  # None when the annotation cannot be read (treated as expired)
    by: str


def ref(obj: Json) -> str:
    """`namespace/name` of a namespaced object."""
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}"


def notes(obj: Json) -> dict[str, str]:
    """The object's annotations (empty when it has none)."""
    return dict(obj.get("metadata", {}).get("annotations") or {})


def requested_seconds(rayjob: Json) -> int | None:
    """The reservation a RayJob asks for, or None (no annotation, or not a positive integer)."""
    raw = notes(rayjob).get(REQUEST, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def finished(rayjob: Json) -> bool:
    """Whether KubeRay reports the job as Complete or Failed."""
    return rayjob.get("status", {}).get("jobDeploymentStatus") in FINISHED


def stamp(epoch_s: float) -> str:
    """RFC 3339 in UTC, to the second."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 time, or None when it is not one."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.timestamp() if parsed.tzinfo else None


def reservation(node: Json) -> Reservation | None:
    """Warden's reservation of the node, if it holds one."""
    found = notes(node)
    by = found.get(BY)
    if not by or "/" not in by:
        return None
    return Reservation(by.split("/", 1)[0], parse_stamp(found.get(UNTIL, "")), by)


def expired(held: Reservation, now: float) -> bool:
    """An unreadable end counts as expired: a reservation must never hold a node forever."""
    return held.until is None or held.until <= now


def taints(node: Json) -> list[Json]:
    return list(node.get("spec", {}).get("taints") or [])


def ours(taint: Json, key: str, namespace: str) -> bool:
    """The taint Warden sets for a namespace's reservation."""
    return (taint.get("key"), taint.get("value"), taint.get("effect")) == (key, namespace, EFFECT)


def foreign_reservation(node: Json, key: str) -> bool:
    """A reservation taint Warden did not set (e.g. a node pool reserved for a team)."""
    held = reservation(node)
    return any(t.get("key") == key and (held is None or not ours(t, key, held.namespace))
               for t in taints(node))


def _guarded(node: Json, annotations: dict[str, str | None]) -> Json:
    meta = {"resourceVersion": node["metadata"]["resourceVersion"], "annotations": annotations}
    return {"metadata": meta}


def track_patch(node: Json, job: str, seconds: int) -> Json | None:
    """Remember that the job's worker runs on the node; None when the node says so already."""
    current = notes(node)
    if (current.get(TRACKED_JOB), current.get(TRACKED_SECONDS)) == (job, str(seconds)):
        return None
    return _guarded(node, {TRACKED_JOB: job, TRACKED_SECONDS: str(seconds)})


def untrack_patch(node: Json) -> Json:
    """Forget the tracked job without reserving (another claim on the node wins)."""
    return _guarded(node, {TRACKED_JOB: None, TRACKED_SECONDS: None})


def reserve_patch(node: Json, key: str, until: float) -> Json:
    """Turn the node's tracked job into a reservation for its namespace until `until`.

    A reservation Warden already holds for the same namespace is extended, never shortened.
    """
    job = notes(node)[TRACKED_JOB]
    namespace = job.split("/", 1)[0]
    held = reservation(node)
    if held is not None and held.namespace == namespace and held.until is not None:
        until = max(until, held.until)
    kept = [t for t in taints(node) if not ours(t, key, namespace)]
    patch = _guarded(node, {TRACKED_JOB: None, TRACKED_SECONDS: None,
                            UNTIL: stamp(until), BY: job})
    patch["spec"] = {"taints": [*kept, {"key": key, "value": namespace, "effect": EFFECT}]}
    return patch


def release_patch(node: Json, key: str) -> Json:
    """End Warden's reservation: its annotations and its own taint; other taints stay."""
    held = reservation(node)
    namespace = held.namespace if held else ""
    kept = [t for t in taints(node) if not ours(t, key, namespace)]
    patch = _guarded(node, {UNTIL: None, BY: None})
    patch["spec"] = {"taints": kept or None}
    return patch
