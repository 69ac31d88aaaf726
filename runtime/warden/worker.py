"""Build and run a Warden worker: real seams from the config, the workflows, the sweeps."""

from __future__ import annotations

import asyncio
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from runtime.identity import Env
from runtime.telemetry.events import event_log
from runtime.warden.activities import Seams, WardenActivities
from runtime.warden.alive import beat
from runtime.warden.cluster import KubeCluster
from runtime.warden.config import WardenConfig
from runtime.warden.gce import GceRepair
from runtime.warden.interfaces import Cluster, EventLog, OwnerNotifier
from runtime.warden.jobcheck import JobNodeCheck
from runtime.warden.model import SWEEP_WORKFLOW, SweepPlan
from runtime.warden.notify import WebhookNotifier, kube_notifiers
from runtime.warden.prometheus import PrometheusTelemetry
from runtime.warden.workflows import (
    NodeWorkflow,
    PreflightWorkflow,
    ShrinkWorkflow,
    SweepWorkflow,
)


def real_seams(config: WardenConfig, events: EventLog | None = None) -> Seams:
    """The production seams: Kubernetes API, Prometheus, Compute Engine, Jobs on the node,
    drain notices (`owner_notifiers`), and `events`, else the telemetry store
    GKR_TELEMETRY_DSN names for Warden's actions (else its log)."""
    cluster = KubeCluster.connect(config.kubernetes)
    return Seams(
        cluster=cluster,
        telemetry=PrometheusTelemetry(config.prometheus, config.detection.node_label),
        cloud=GceRepair(config.cloud),
        check=JobNodeCheck(cluster, config.checks),
        events=events if events is not None else event_log(),
        notifiers=owner_notifiers(config, cluster),
    )


def owner_notifiers(config: WardenConfig, cluster: Cluster) -> list[OwnerNotifier]:
    """Events and the workload annotation, then the chat webhook when the environment names
    one (Env.WARDEN_WEBHOOK): last, so that it posts once the Kubernetes records are made."""
    url = os.environ.get(Env.WARDEN_WEBHOOK, "")
    webhook = [WebhookNotifier(url, config.notify.webhook_timeout_s)] if url else []
    return [*kube_notifiers(cluster), *webhook]


def build_worker(client: Client, config: WardenConfig, seams: Seams,
                 executor: ThreadPoolExecutor) -> Worker:
    """A worker for every Warden workflow and activity on the configured task queue."""
    activities = WardenActivities(config, seams, client)
    # Every activity in flight holds a slot, waits too (a check, a drain, a reboot: up to
    # hours); the SDK's default is 100. A node workflow runs one activity at a time, so a queue
    # never has more in flight than its nodes in an incident plus the sweeps: with that many
    # slots a cordon never queues behind waits. Many slots on one queue rather than a second
    # queue for the waits: the waits would need as many slots there (a suspect's check must
    # not queue behind others' hour-long stress tests either), and a second worker is one more
    # poller to run and watch. An unused slot costs nothing. The SDK warns when slots exceed
    # the thread pool, which holds for activities that block; Warden's waits are coroutines,
    # and a burst of its short blocking ones queues briefly in the pool.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Worker max_concurrent_activities is")
        return Worker(
            client,
            task_queue=config.temporal.task_queue,
            workflows=[NodeWorkflow, SweepWorkflow, ShrinkWorkflow, PreflightWorkflow],
            # The sandbox still refuses non-deterministic calls, but imports no module anew
            # for each workflow run: Warden's workflow modules hold no state, and the
            # re-imports made a node workflow's first task several times dearer (62 node
            # workflows started at once reached their cordon in 4.5 s instead of 1.4 s on the
            # same machine, and the worker's RSS halved; found with benchmarks/fleet/warden.py).
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_all_modules()),
            activities=activities.all(),
            activity_executor=executor,
            max_concurrent_activities=config.temporal.max_concurrent_activities,
            graceful_shutdown_timeout=timedelta(seconds=5),
        )


def sweep_plans(config: WardenConfig) -> dict[str, SweepPlan]:
    """The periodic sweeps by workflow id (one set per task queue, i.e. per cluster)."""
    timeout = config.activity_timeout_s
    iterations = config.sweep_iterations
    queue = config.temporal.task_queue
    detect = SweepPlan("warden.detect_and_trigger", config.detection.interval_s,
                       iterations, timeout)
    recover = SweepPlan("warden.sweep_cordoned", config.recovery.sweep_interval_s,
                        iterations, timeout)
    plans = {f"warden-detect-{queue}": detect, f"warden-recover-{queue}": recover}
    if config.reservations.enabled:
        plans[f"warden-reserve-{queue}"] = SweepPlan(
            "warden.keep_reservations", config.reservations.interval_s, iterations, timeout)
    return plans


async def ensure_sweeps(client: Client, config: WardenConfig) -> None:
    """Start the sweeps unless they run already (every replica calls this; one set runs)."""
    for workflow_id, plan in sweep_plans(config).items():
        await client.start_workflow(
            SWEEP_WORKFLOW, plan, id=workflow_id, task_queue=config.temporal.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )


async def serve(config: WardenConfig, seams: Seams | None = None) -> None:
    """Connect, make sure the sweeps run, and work until cancelled."""
    client = await Client.connect(config.temporal.address, namespace=config.temporal.namespace)
    with ThreadPoolExecutor(max_workers=16) as executor:
        worker = build_worker(client, config, seams or real_seams(config), executor)
        await ensure_sweeps(client, config)
        heart = asyncio.create_task(beat(Path(config.liveness_file))) if config.liveness_file \
            else None
        try:
            await worker.run()
        finally:
            if heart is not None:
                heart.cancel()
