"""Starting Warden's workflows from outside: detection, the CLI, live fault tolerance.

A node trigger is a signal-with-start on the node's fixed workflow id with the
USE_EXISTING conflict policy: the first trigger starts the workflow, later ones join it.
"""

from __future__ import annotations

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

from runtime.warden.config import WardenConfig
from runtime.warden.model import (
    NODE_WORKFLOW,
    PREFLIGHT_WORKFLOW,
    SHRINK_WORKFLOW,
    NodeInput,
    NodePolicy,
    PreflightReport,
    ShrinkOutcome,
    ShrinkRequest,
    Trigger,
    node_workflow_id,
)


def node_policy(config: WardenConfig) -> NodePolicy:
    """The durations a node workflow runs with, taken from the config once at start."""
    recovery, checks = config.recovery, config.checks
    return NodePolicy(
        drain_grace_s=recovery.drain_grace_s,
        drain_timeout_s=recovery.drain_timeout_s,
        reboot_timeout_s=recovery.reboot_timeout_s,
        repair_timeout_s=recovery.repair_timeout_s,
        check_timeout_s=checks.preflight.timeout_s,
        stress_timeout_s=checks.stress.timeout_s,
        max_attempts=recovery.max_attempts,
        activity_timeout_s=config.activity_timeout_s,
        heartbeat_s=config.heartbeat_s,
    )


async def trigger_node(
    client: Client, config: WardenConfig, node: str, trigger: Trigger
) -> WorkflowHandle:
    """Start the node's workflow, or signal the one already running."""
    return await client.start_workflow(
        NODE_WORKFLOW,
        NodeInput(node, node_policy(config)),
        id=node_workflow_id(node),
        task_queue=config.temporal.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="trigger",
        start_signal_args=[trigger],
        memo={"node": node},
    )


async def request_shrink(
    client: Client, config: WardenConfig, request: ShrinkRequest
) -> ShrinkOutcome:
    """Ask Warden to shrink a RayCluster; the same request id always yields one shrink."""
    handle = await client.start_workflow(
        SHRINK_WORKFLOW,
        request,
        id=f"warden-shrink-{request.request_id}",
        task_queue=config.temporal.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=ShrinkOutcome,
    )
    return await handle.result()


async def report_preflight(client: Client, config: WardenConfig,
                           report: PreflightReport) -> WorkflowHandle:
    """Hand Warden a job's preflight result; the same report id is applied once. Not
    awaited: the job goes on (runs, retries or ends) while Warden records and checks."""
    return await client.start_workflow(
        PREFLIGHT_WORKFLOW,
        report,
        id=f"warden-preflight-{report.report_id}",
        task_queue=config.temporal.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
