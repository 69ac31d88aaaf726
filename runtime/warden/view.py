"""Warden's public API: read its state for people (node workflows from Temporal; cordon memory
and relaunch reservations from node annotations), ask it to shrink a RayCluster (live
fault tolerance, seed §7.2), and hand it a job's preflight result (runtime.preflight.gate).

Listing reads the phase from each workflow's memo, so it needs no worker; the incidents of a
closed run are its results, and a running one answers the `incident` query.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from runtime.kube import NotFound, Unreachable
from runtime.warden import memory, reservations
from runtime.warden.cluster import KubeCluster
from runtime.warden.config import KubernetesSettings, TemporalSettings, WardenConfig
from runtime.warden.interfaces import Cluster
from runtime.warden.model import (
    NODE_WORKFLOW,
    Incident,
    PreflightReport,
    ShrinkOutcome,
    ShrinkRequest,
    node_workflow_id,
)
from runtime.warden.triggers import report_preflight as start_report
from runtime.warden.triggers import request_shrink as start_shrink

MEMORY_KEYS = {
    "recent_cordons": memory.RECENT, "last_cordon": memory.LAST,
    "reason": memory.REASON, "state": memory.STATE,
    "cleared": memory.CLEARED, "cleared_until": memory.CLEARED_UNTIL,
}


def _stamp(execution: WorkflowExecution) -> dict[str, Any]:
    return {
        "workflow_id": execution.id,
        "run_id": execution.run_id,
        "status": execution.status.name if execution.status else "UNKNOWN",
        "started": execution.start_time.isoformat(),
        "closed": execution.close_time.isoformat() if execution.close_time else None,
    }


async def fleet_status(client: Client) -> list[dict[str, Any]]:
    """The latest node workflow of every node Warden has handled, with its phase."""
    latest: dict[str, dict[str, Any]] = {}
    query = f'WorkflowType = "{NODE_WORKFLOW}"'
    async for execution in client.list_workflows(query):
        memo = await execution.memo()
        node = memo.get("node", execution.id)
        row = {"node": node, "phase": memo.get("phase", "triage"), **_stamp(execution)}
        if node not in latest or row["started"] > latest[node]["started"]:
            latest[node] = row
    return sorted(latest.values(), key=lambda row: row["node"])


async def node_history(client: Client, node: str) -> list[dict[str, Any]]:
    """Every incident of a node, oldest first, with its steps."""
    rows = []
    async for execution in client.list_workflows(f'WorkflowId = "{node_workflow_id(node)}"'):
        incident = await _incident(client, execution)
        detail = dataclasses.asdict(incident) if incident else {}
        rows.append({**_stamp(execution), **detail})
    return sorted(rows, key=lambda row: row["started"])


async def _incident(client: Client, execution: WorkflowExecution) -> Incident | None:
    handle = client.get_workflow_handle(execution.id, run_id=execution.run_id,
                                        result_type=Incident)
    if execution.status == WorkflowExecutionStatus.COMPLETED:
        return await handle.result()
    if execution.status == WorkflowExecutionStatus.RUNNING:
        return await handle.query("incident", result_type=Incident)
    return None


def node_memory(cluster: Cluster, node: str) -> dict[str, Any]:
    """Warden's memory of a node as its annotations hold it (state `deleted` once it is gone)."""
    try:
        current = cluster.get_node(node)
    except NotFound:  # a node Warden once handled may have been replaced since
        return {"node": node, **dict.fromkeys(MEMORY_KEYS), "state": "deleted"}
    notes = memory.notes(current)
    found = {key: notes.get(annotation) for key, annotation in MEMORY_KEYS.items()}
    return {"node": node, "cordoned": bool(current.get("spec", {}).get("unschedulable")),
            **found, **_reserved(current)}


def _reserved(node: dict[str, Any]) -> dict[str, Any]:
    held = reservations.reservation(node)
    notes = memory.notes(node)
    return {"reserved_for": held.namespace if held else None,
            "reserved_until": notes.get(reservations.UNTIL) if held else None,
            "reserved_by": held.by if held else None}


def reserved_nodes(cluster: Cluster) -> list[dict[str, Any]]:
    """Every node Warden holds a relaunch reservation on: for whom, until when, for which job."""
    rows = [{"node": n["metadata"]["name"], **_reserved(n)} for n in cluster.list_nodes("")]
    return [row for row in rows if row["reserved_for"]]


@dataclasses.dataclass(frozen=True)
class Where:
    """Where Warden's state lives: its Temporal namespace, and (optionally) the cluster whose
    node annotations hold the cordon memory and reservations."""

    address: str
    namespace: str
    kubeconfig: str | None = None


async def fleet_report(where: Where) -> list[dict[str, Any]]:
    """`gkr warden status`: the latest incident phase of every node, and reserved nodes."""
    rows = await fleet_status(await _connect(where))
    cluster = _cluster(where)
    if cluster is not None:
        rows = [{**row, **node_memory(cluster, row["node"]), "phase": row["phase"]}
                for row in rows]
        handled = {row["node"] for row in rows}
        rows += [r for r in reserved_nodes(cluster) if r["node"] not in handled]
    return sorted(rows, key=lambda row: row["node"])


async def node_report(where: Where, node: str) -> list[dict[str, Any]]:
    """`gkr warden history NODE`: every incident of one node, then its cordon memory."""
    rows = await node_history(await _connect(where), node)
    cluster = _cluster(where)
    if cluster is not None:
        rows.append({"started": "now", "trigger": "(node annotations)",
                     **node_memory(cluster, node)})
    return rows


async def request_shrink(where: Where, request: ShrinkRequest,
                         task_queue: str = "warden") -> ShrinkOutcome:
    """Lower a RayCluster worker group for live fault tolerance, and wait for Warden's answer;
    the same request id is applied once however often it is asked."""
    settings = TemporalSettings(address=where.address, namespace=where.namespace,
                                task_queue=task_queue)
    return await start_shrink(await _connect(where), WardenConfig(temporal=settings), request)


async def report_preflight(where: Where, report: PreflightReport,
                           task_queue: str = "warden") -> None:
    """Hand Warden a job's preflight result: it annotates the workload (what `gkr status`
    shows) and starts a suspect's node workflow for each node blamed. Returns once Temporal
    holds the report, without waiting for Warden to act on it."""
    settings = TemporalSettings(address=where.address, namespace=where.namespace,
                                task_queue=task_queue)
    await start_report(await _connect(where), WardenConfig(temporal=settings), report)


async def _connect(where: Where) -> Client:
    try:
        return await Client.connect(where.address, namespace=where.namespace)
    except RuntimeError as error:
        raise Unreachable(f"cannot reach Temporal at {where.address}: {error}") from error


def _cluster(where: Where) -> Cluster | None:
    if where.kubeconfig is None:
        return None
    return KubeCluster.connect(KubernetesSettings(kubeconfig=where.kubeconfig))
