"""What happened to pods and nodes, as `events` rows: Kubernetes events and Warden's actions.

* Kubernetes events (core/v1 `Event`, as `runtime.kube.Kube.events` returns them) become one
  row each. The row's identity comes from the object the event is about: a Node event names
  its node; a Pod event names the pod, and the pod itself (when listed) gives its node, its
  job, team, kind and role from GKR's labels and its cluster and run from the GKR_* values of
  its containers' environment.
* Warden's actions (cordon, escalation, reboot, repair, uncordon, a phase it settles in) go
  through `runtime.warden.interfaces.EventLog`: `StoreEvents` writes them to the store named
  by GKR_TELEMETRY_DSN, in batches off Warden's threads; without it, `LogEvents` logs them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runtime.identity import Env, Identity, Label
from runtime.telemetry.writer import Row, StoreSink, TelemetryWriter, utc_now

if TYPE_CHECKING:
    from runtime.kube import Kube

log = logging.getLogger(__name__)
TABLE = "events"
WARDEN = "warden"  # the `source` of Warden's rows
KUBERNETES = "kubernetes"  # the `source` of Kubernetes events (…/component when known)
# Identity fields a GKR pod's labels carry (generator/pods.py puts them there).
_LABELS = {"job": Label.JOB, "kind": Label.KIND, "team": Label.TEAM, "role": Label.ROLE}
# When the event happened, newest field first: core/v1 Event has several, set by different
# reporters (kubelet sets first/lastTimestamp, events.k8s.io clients eventTime and series).
_TIMES = (("lastTimestamp",), ("series", "lastObservedTime"), ("eventTime",),
          ("firstTimestamp",), ("metadata", "creationTimestamp"))
# Warden's actions that are routine rather than a fault being handled.
_NORMAL = frozenset({"uncordon", "healthy", "cleared"})


def kube_event_rows(events: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = (),
                    cluster: str = "") -> list[Row]:
    """One row per Kubernetes event; `pods` (any the events may be about) give identities."""
    by_name = {(_meta(p).get("namespace", ""), _meta(p).get("name", "")): p for p in pods}
    return [kube_event_row(event, by_name, cluster) for event in events]


def kube_event_row(event: Mapping[str, Any], pods: Mapping[tuple[str, str], Mapping[str, Any]],
                   cluster: str = "") -> Row:
    """One event's row; its identity from the involved object (and `pods`, by namespace/name)."""
    about = event.get("involvedObject") or {}
    kind, name = str(about.get("kind", "")), str(about.get("name", ""))
    namespace = str(about.get("namespace") or "")
    who = Identity(cluster=cluster, namespace=namespace)
    if kind == "Node":
        who = replace(who, node=name)
    elif kind == "Pod":
        pod = pods.get((namespace, name))
        host = str((event.get("source") or {}).get("host", ""))  # the kubelet's node
        who = pod_identity(pod, cluster) if pod else replace(who, pod=name, node=host)
    return {"ts": event_time(event), **who.row(), "source": _source(event),
            "object_kind": kind, "object_name": name, "reason": str(event.get("reason", "")),
            "severity": str(event.get("type") or "Normal"),
            "message": str(event.get("message", "")), "count": _count(event)}


def pod_identity(pod: Mapping[str, Any], cluster: str = "") -> Identity:
    """Who a pod is: namespace, name and node; job, team, kind and role from GKR's labels;
    cluster, run and learner from the literal GKR_* values in its containers' environment."""
    meta, spec = _meta(pod), pod.get("spec") or {}
    env = {str(var["name"]): str(var["value"])
           for container in spec.get("containers") or [] for var in container.get("env") or []
           if "name" in var and "value" in var}
    labels = meta.get("labels") or {}
    known = {field: str(labels[key]) for field, key in _LABELS.items() if labels.get(key)}
    found = Identity.from_env(env, **known, namespace=str(meta.get("namespace", "")),
                              pod=str(meta.get("name", "")), node=str(spec.get("nodeName", "")))
    return replace(found, cluster=found.cluster or cluster)


def event_time(event: Mapping[str, Any]) -> datetime:
    """When the event (last) happened; now when it says nothing (an event being created)."""
    for path in _TIMES:
        value: Any = event
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return utc_now()


def collect(kube: Kube, cluster: str, namespace: str | None = None) -> list[Row]:
    """The events of a namespace (or all) as rows, with the pods they are about looked up."""
    from runtime.kube import POD

    events = kube.events(namespace=namespace)
    spaces = sorted({str((e.get("involvedObject") or {}).get("namespace") or "")
                     for e in events if (e.get("involvedObject") or {}).get("kind") == "Pod"})
    pods = [pod for space in spaces if space for pod in kube.list(POD, namespace=space)]
    return kube_event_rows(events, pods, cluster)


def warden_row(node: str, action: str, reason: str, message: str) -> Row:
    """A Warden action on a node, as the values of an `events` row (the writer adds who)."""
    text = f"{message}: {reason}" if reason and message else (message or reason)
    return {"ts": utc_now(), "pod": "", "node": node, "source": WARDEN,
            "object_kind": "Node", "object_name": node, "reason": _reason(action),
            "severity": "Normal" if action in _NORMAL else "Warning", "message": text,
            "count": 1}


class LogEvents:
    """EventLog without a store: Warden's actions go to its log only."""

    def record(self, node: str, action: str, reason: str, message: str) -> None:
        """Log one action."""
        log.info("warden %s %s: %s (%s)", action, node, message, reason)

    def close(self) -> None:
        """Nothing to flush."""


class StoreEvents(LogEvents):
    """EventLog into the telemetry store, batched off the caller's thread: a slow or absent
    store costs rows (counted and logged by the writer), never a Warden activity."""

    def __init__(self, dsn: str, identity: Identity | None = None) -> None:
        who = identity or Identity.from_env(role=WARDEN)
        self.writer = TelemetryWriter(StoreSink(dsn), who)

    def record(self, node: str, action: str, reason: str, message: str) -> None:
        """Log the action and queue its row."""
        super().record(node, action, reason, message)
        self.writer.write(TABLE, warden_row(node, action, reason, message))

    def close(self) -> None:
        """Write what is queued."""
        self.writer.close()


def event_log(environ: Mapping[str, str] | None = None) -> LogEvents:
    """Warden's EventLog: the store GKR_TELEMETRY_DSN names, else the log only."""
    env = os.environ if environ is None else environ
    dsn = env.get(Env.TELEMETRY_DSN)
    return StoreEvents(dsn, Identity.from_env(env, role=WARDEN)) if dsn else LogEvents()


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _source(event: Mapping[str, Any]) -> str:
    component = (event.get("source") or {}).get("component") or event.get("reportingComponent")
    return f"{KUBERNETES}/{component}" if component else KUBERNETES


def _count(event: Mapping[str, Any]) -> int:
    series = event.get("series") or {}
    return int(event.get("count") or series.get("count") or 1)


def _reason(action: str) -> str:
    """`needs-human` -> `WardenNeedsHuman`: a Kubernetes-style reason."""
    return WARDEN.capitalize() + "".join(part.capitalize() for part in action.split("-"))
