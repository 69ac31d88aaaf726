"""Warden's activities: every side effect of a workflow happens here, through the seams.

Each activity is safe to retry: the node's annotations, the check Job's name and the cloud
request key make a repeated call observe the first one instead of acting twice.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import Client

from runtime.errors import ConfigError
from runtime.identity import Annotation
from runtime.kube import NotFound
from runtime.telemetry.events import LogEvents
from runtime.warden import memory
from runtime.warden.config import WardenConfig
from runtime.warden.detect import Detector
from runtime.warden.interfaces import (
    CloudRepair,
    Cluster,
    DrainNotice,
    EventLog,
    NodeCheck,
    OwnerNotifier,
    Telemetry,
)
from runtime.warden.keeper import ReservationKeeper
from runtime.warden.model import (
    PREFLIGHT_SIGNAL,
    CheckResult,
    CordonOutcome,
    PowerRequest,
    PreflightReport,
    ReservationSweep,
    ShrinkOutcome,
    ShrinkRequest,
    Trigger,
    Workloads,
)
from runtime.warden.notify import kube_notifiers
from runtime.warden.reservations import stamp
from runtime.warden.shrink import shrink as shrink_raycluster
from runtime.warden.triggers import trigger_node
from runtime.warden.workloads import (
    classify_pods,
    drain_notices,
    pod_ref,
    rayclusters_to_read,
    user_pods,
)

TRIGGERS_AT_ONCE = 32  # signal-with-start calls in flight to Temporal at once, per sweep


@dataclass
class Seams:
    """The real services (or their doubles) the activities act through."""

    cluster: Cluster
    telemetry: Telemetry
    cloud: CloudRepair
    check: NodeCheck
    events: EventLog = field(default_factory=LogEvents)  # what Warden did, for people
    # How owners hear of a drain, in order; None: the Kubernetes ones (notify.kube_notifiers).
    notifiers: list[OwnerNotifier] | None = None


class WardenActivities:
    """Activities bound to one config, one set of seams and one Temporal client."""

    def __init__(self, config: WardenConfig, seams: Seams, client: Client) -> None:
        self.config, self.seams, self.client = config, seams, client
        self.cluster = seams.cluster
        self.notifiers = kube_notifiers(self.cluster) if seams.notifiers is None \
            else seams.notifiers

    def all(self) -> list[Any]:
        """Every activity, for the worker's registration."""
        return [
            self.detect_and_trigger, self.sweep_cordoned, self.held_off, self.run_check,
            self.clear, self.cordon, self.cordon_memory, self.set_state, self.workloads,
            self.notify_owners, self.evict, self.await_no_workloads, self.power,
            self.await_boot, self.uncordon, self.shrink, self.keep_reservations,
            self.preflight,
        ]

    @activity.defn(name="warden.detect_and_trigger")
    async def detect_and_trigger(self) -> list[str]:
        """Detection sweep: start (or join) the node workflow of every faulty or suspect node."""
        detector = Detector(self.config.detection, self.cluster, self.seams.telemetry)
        found = await asyncio.to_thread(detector.sweep)
        await self._trigger_all([(s.node, s.trigger) for s in found])
        return [s.node for s in found]

    @activity.defn(name="warden.sweep_cordoned")
    async def sweep_cordoned(self) -> list[str]:
        """Recovery sweep: restart recovery of the nodes Warden cordoned and left waiting."""
        selector = self.config.detection.node_selector
        nodes = await asyncio.to_thread(self.cluster.list_nodes, selector)
        waiting = [n["metadata"]["name"] for n in nodes if memory.awaits_recovery(n)]
        recover = Trigger("recover", "periodic recovery sweep", "recovery")
        await self._trigger_all([(name, recover) for name in waiting])
        return waiting

    async def _trigger_all(self, triggers: list[tuple[str, Trigger]]) -> None:
        """Start (or join) node workflows together: one after another, a burst of 60 faulty
        nodes took seconds of round trips before the last one's cordon could start."""
        room = asyncio.Semaphore(TRIGGERS_AT_ONCE)

        async def one(node: str, trigger: Trigger) -> None:
            async with room:
                await trigger_node(self.client, self.config, node, trigger)

        outcomes = await asyncio.gather(*(one(node, trigger) for node, trigger in triggers),
                                        return_exceptions=True)
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:  # every node was tried; the sweep fails with the first error
            raise failed[0]

    # The activities that wait (a check, a drain, a reboot: minutes to hours) are coroutines
    # that sleep between polls: a blocking one held a worker thread for the whole wait, and
    # once a burst of incidents filled the pool (16 threads), the next fault's cordon waited
    # for a stress test to end (benchmarks/fleet/warden.py).
    @activity.defn(name="warden.run_check")
    async def run_check(self, node: str, suite: str, name: str) -> CheckResult:
        """Run the preflight suite or the stress test as a Job on the node; wait for its result."""
        checks = self.config.checks
        chosen = checks.preflight if suite == "preflight" else checks.stress.as_suite()
        try:
            await asyncio.to_thread(self.seams.check.start, node, chosen, name)
        except ConfigError as error:  # no facts for this node's GPUs: a human must look
            return CheckResult(False, [str(error)])
        while (result := await asyncio.to_thread(self.seams.check.result, name)) is None:
            activity.heartbeat(name)
            await asyncio.sleep(self.config.recovery.poll_s)
        return result

    @activity.defn(name="warden.held_off")
    def held_off(self, node: str, signals: list[str]) -> str:
        """When the hold-off of these suspect signals ends, or "" when a check is due. Read
        afresh: a sweep that listed the node just before a check cleared it may trigger it."""
        notes = memory.notes(self.cluster.get_node(node))
        holdoff = self.config.detection.cleared_holdoff_s
        return memory.held_off_until(notes, signals, time.time(), holdoff, node=node) or ""

    @activity.defn(name="warden.clear")
    def clear(self, node: str, reason: str, signals: list[str]) -> str:
        """Remember that the node check cleared these suspect signals, so that detection starts
        no new check for them until the hold-off ends; returns its end ("" for none)."""
        holdoff = self.config.detection.cleared_holdoff_s
        until = ""
        if signals and holdoff > 0:
            patch, until = memory.clear_patch(signals, time.time(), holdoff)
            self.cluster.patch_node(node, patch)
        held = f"held off until {until}" if until else "not held off"
        self.seams.events.record(node, "cleared", reason, f"suspect cleared by the node "
                                 f"check; {held}")
        return until

    @activity.defn(name="warden.cordon")
    def cordon(self, node: str, reason: str, incident: str) -> CordonOutcome:
        """Cordon and remember; a retry within the same incident and step records nothing new."""
        current = self.cluster.get_node(node)
        notes = memory.notes(current)
        window = self.config.memory.window_s
        if notes.get(memory.INCIDENT) == incident and current["spec"].get("unschedulable"):
            return self._outcome(len(memory.recent_cordons(notes, time.time(), window,
                                                           node=node)))
        patch, count = memory.cordon_patch(notes, time.time(), window, reason, incident,
                                           node=node)
        self.cluster.patch_node(node, patch)
        activity.logger.info("cordoned %s (%d recent): %s", node, count, reason)
        outcome = self._outcome(count)
        self.seams.events.record(node, "cordon", reason, f"cordoned ({count} recent)")
        if outcome.escalate:
            self.seams.events.record(node, "escalate", reason, f"{count} cordons within "
                                     f"{window:.0f}s: the next power cycle is a cloud repair")
        return outcome

    @activity.defn(name="warden.cordon_memory")
    def cordon_memory(self, node: str) -> CordonOutcome:
        """The recent-cordon count of a node already cordoned (recovery sweep)."""
        notes = memory.notes(self.cluster.get_node(node))
        times = memory.recent_cordons(notes, time.time(), self.config.memory.window_s,
                                      node=node)
        return self._outcome(len(times))

    def _outcome(self, count: int) -> CordonOutcome:
        return CordonOutcome(count, count >= self.config.memory.escalate_after)

    @activity.defn(name="warden.set_state")
    def set_state(self, node: str, state: str) -> None:
        """Write the recovery phase on the node."""
        self.cluster.patch_node(node, memory.state_patch(state))
        self.seams.events.record(node, state, "", f"settled: {state}")

    @activity.defn(name="warden.workloads")
    def workloads(self, node: str) -> Workloads:
        """User pods left on the node, split into blocking and drainable."""
        pods = self.cluster.pods_on_node(node)
        return classify_pods(self.config.recovery, pods, self._rayclusters(pods))

    def _rayclusters(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The RayClusters whose shape decides about these pods, by `namespace/name`; one
        that is gone is left out (its pods, being collected, block until they leave)."""
        found = {}
        for ref in rayclusters_to_read(self.config.recovery, pods):
            namespace, name = ref.split("/", 1)
            with suppress(NotFound):
                found[ref] = self.cluster.get_raycluster(namespace, name)
        return found

    @activity.defn(name="warden.notify_owners")
    def notify_owners(self, node: str, pods: list[str], grace_s: float) -> None:
        """Tell the owner of each workload with pods to drain, through every notifier, when and
        why they are evicted. The notifiers go in order, the webhook last: a retry after a
        failed Kubernetes write (Events, annotations: these raise) posts no message twice."""
        notices = self._notices(node, pods, grace_s)
        for notifier in self.notifiers:
            notifier.notify(notices)

    def _notices(self, node: str, pods: list[str], grace_s: float) -> list[DrainNotice]:
        """The notices of these pods, read afresh: a pod gone meanwhile needs none."""
        wanted = set(pods)
        chosen = [p for p in self.cluster.pods_on_node(node) if pod_ref(p) in wanted]
        chosen = user_pods(self.config.recovery, chosen)
        reason = memory.notes(self.cluster.get_node(node)).get(memory.REASON, "")
        deadline = stamp(time.time() + grace_s)
        return drain_notices(chosen, self._rayclusters(chosen), node, reason, deadline, grace_s)

    @activity.defn(name="warden.evict")
    def evict(self, pods: list[str]) -> None:
        """Evict pods through the Eviction API (honours PodDisruptionBudgets)."""
        for ref in pods:
            namespace, name = ref.split("/", 1)
            self.cluster.evict(namespace, name)

    @activity.defn(name="warden.await_no_workloads")
    async def await_no_workloads(self, node: str, timeout_s: float) -> bool:
        """Wait until no user pod is left on the node; False when the time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pods = await asyncio.to_thread(self.cluster.pods_on_node, node)
            left = len(user_pods(self.config.recovery, pods))
            if not left:
                return True
            activity.heartbeat(left)
            await asyncio.sleep(self.config.recovery.poll_s)
        return False

    @activity.defn(name="warden.power")
    def power(self, request: PowerRequest) -> str:
        """Reboot or repair once per key; returns the boot id the node had before."""
        node = self.cluster.get_node(request.node)
        recorded = memory.notes(node).get(memory.POWER, "")
        key, _, boot_id = recorded.partition("|")
        if key != request.key:
            boot_id = node.get("status", {}).get("nodeInfo", {}).get("bootID", "")
            note = {memory.POWER: f"{request.key}|{boot_id}", memory.STATE: request.action}
            self.cluster.patch_node(request.node, {"metadata": {"annotations": note}})
        provider_id = node["spec"]["providerID"]
        if request.action == "reboot":
            self.seams.cloud.reboot(provider_id, request.key)
        else:
            self.seams.cloud.request_repair(provider_id, request.key, request.reason)
        self.seams.events.record(request.node, request.action, request.reason,
                                 f"{request.action} requested")
        return boot_id

    @activity.defn(name="warden.await_boot")
    async def await_boot(self, node: str, old_boot_id: str, timeout_s: float) -> bool:
        """Wait until the node is Ready with a new boot id; False when the time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _rebooted(await asyncio.to_thread(self.cluster.get_node, node), old_boot_id):
                return True
            activity.heartbeat(node)
            await asyncio.sleep(self.config.recovery.poll_s)
        return False

    @activity.defn(name="warden.uncordon")
    def uncordon(self, node: str) -> None:
        """Return the node to service, keeping its cordon history."""
        self.cluster.patch_node(node, memory.uncordon_patch())
        self.seams.events.record(node, "uncordon", "", "returned to service")

    @activity.defn(name="warden.shrink")
    def shrink(self, request: ShrinkRequest) -> ShrinkOutcome:
        """Lower a RayCluster worker group once per request id (optimistic concurrency)."""
        return shrink_raycluster(self.cluster, request)

    @activity.defn(name="warden.preflight")
    async def preflight(self, report: PreflightReport) -> list[str]:
        """Record a job's preflight result on the workload (gone meanwhile: nothing to mark),
        then start (or join) a suspect's node workflow for each node it blames: the node
        check decides, as for any ambiguous signal."""
        with suppress(NotFound):
            await asyncio.to_thread(self.cluster.annotate, report.kind, report.namespace,
                                    report.name, {Annotation.PREFLIGHT: report.record})
        job = f"{report.namespace}/{report.name}"
        await self._trigger_all([
            (node, Trigger("suspect", f"preflight of {job}: {why}", "preflight",
                           signals=(PREFLIGHT_SIGNAL,)))
            for node, why in sorted(report.suspects.items())])
        return sorted(report.suspects)

    @activity.defn(name="warden.keep_reservations")
    def keep_reservations(self) -> ReservationSweep:
        """Reservation sweep: track RayJob nodes, reserve them when it ends, release on expiry."""
        keeper = ReservationKeeper(self.config.reservations, self.cluster)
        swept = keeper.sweep(time.time())
        for kind, lines in (("tracked", swept.tracked), ("reserved", swept.reserved),
                            ("released", swept.released)):
            for line in lines:
                activity.logger.info("reservation %s %s", kind, line)
        return swept


def _rebooted(node: dict[str, Any], old_boot_id: str) -> bool:
    status = node.get("status", {})
    boot_id = status.get("nodeInfo", {}).get("bootID", "")
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions", [])
    )
    return ready and boot_id != old_boot_id

