"""What is happening now, for gkr-ui: GKR's pods and the cluster's nodes from the Kubernetes API
(`runtime.kube`), and the nodes Warden is handling (`runtime.warden.view`).

Neither is required: without a reachable cluster or Temporal the page says so and shows the
telemetry alone. So failures here are answers (`reachable: False` and why), never errors.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from runtime.errors import RuntimeFailure
from runtime.identity import MANAGED_BY, WARDEN_TEMPORAL_NAMESPACE, Label, Warden

INSTANCE_TYPE = "node.kubernetes.io/instance-type"  # a well-known label (kubernetes.io docs)
KUBE_TIMEOUT_S = 5.0  # a page waits on this: an unreachable cluster must not hang it
WARDEN_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Reach:
    """Where the live views look: a kubeconfig (None: $KUBECONFIG, else ~/.kube/config) and its
    context (None: the current one), and Warden's Temporal frontend and namespace."""

    kubeconfig: str | None = None
    context: str | None = None
    temporal_address: str = "localhost:7233"
    temporal_namespace: str = WARDEN_TEMPORAL_NAMESPACE


def cluster(reach: Reach) -> dict[str, Any]:
    """The cluster's nodes and GKR's pods, or `reachable: False` and the reason."""
    from runtime.kube import NODE, POD, Kube, current_context

    selector = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
    try:
        kube = Kube.connect(reach.context, reach.kubeconfig, timeout_s=KUBE_TIMEOUT_S)
        nodes, pods = kube.list(NODE), kube.list(POD, labels=selector)
    except RuntimeFailure as error:  # no kubeconfig, unusable credentials, no answer
        return {"reachable": False, "reason": str(error)}
    context = reach.context or getattr(current_context(reach.kubeconfig), "name", None)
    return {"reachable": True, "context": context, "host": kube.host,
            "nodes": [_node(node) for node in nodes], "pods": [_pod(pod) for pod in pods]}


def _node(node: dict[str, Any]) -> dict[str, Any]:
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or []
                  if c.get("type") == "Ready"), None)
    return {"name": meta.get("name"), "ready": ready == "True",
            "cordoned": bool((node.get("spec") or {}).get("unschedulable")),
            "instance_type": (meta.get("labels") or {}).get(INSTANCE_TYPE),
            "warden_state": (meta.get("annotations") or {}).get(Warden.STATE),
            "created": meta.get("creationTimestamp")}


def _pod(pod: dict[str, Any]) -> dict[str, Any]:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    restarts = sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])
    return {"namespace": meta.get("namespace"), "name": meta.get("name"),
            "job": labels.get(Label.JOB), "role": labels.get(Label.ROLE),
            "phase": status.get("phase"), "node": (pod.get("spec") or {}).get("nodeName"),
            "started": status.get("startTime"), "restarts": restarts}


def warden(reach: Reach) -> dict[str, Any]:
    """Every node Warden has handled (its latest incident's phase; `working` while the
    incident runs), with node annotations when a kubeconfig is there; or `reachable: False`."""
    from runtime.warden import view  # Temporal's client is slow to import

    where = view.Where(reach.temporal_address, reach.temporal_namespace,
                       _kubeconfig_file(reach.kubeconfig))
    rows = _fleet(where)
    if isinstance(rows, str) and where.kubeconfig is not None:
        rows = _fleet(replace(where, kubeconfig=None))  # Temporal's view, without annotations
    if isinstance(rows, str):
        return {"reachable": False, "reason": rows}
    return {"reachable": True, "address": where.address,
            "nodes": [{**row, "working": row.get("status") == "RUNNING"} for row in rows]}


def _fleet(where: Any) -> list[dict[str, Any]] | str:
    """Warden's fleet report, or why there is none."""
    from runtime.warden import view

    async def report() -> list[dict[str, Any]]:
        return await asyncio.wait_for(view.fleet_report(where), WARDEN_TIMEOUT_S)

    try:
        return asyncio.run(report())
    except RuntimeFailure as error:  # Temporal or the cluster unreachable, credentials unusable
        return str(error)
    except TimeoutError:
        return f"Temporal at {where.address} did not answer in {WARDEN_TIMEOUT_S:g}s"


def _kubeconfig_file(kubeconfig: str | None) -> str | None:
    """The kubeconfig file Warden's view reads node annotations from, when there is one
    (its `Where` takes a single file; kubectl's path list is cut to its first entry)."""
    listed = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    first = Path(listed.split(os.pathsep)[0]).expanduser()
    return str(first) if first.is_file() else None
