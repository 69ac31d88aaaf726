"""Warden's workflows: one per node, the periodic sweeps, RayCluster shrinks, and jobs'
preflight reports.

Workflow code is deterministic: it only decides and waits; activities do every side effect.
Temporal stores each step's result, so a restarted worker resumes after the last completed
step and never repeats a reboot that already happened.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import suppress
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from runtime.warden.model import (
        NODE_WORKFLOW,
        PREFLIGHT_WORKFLOW,
        SHRINK_WORKFLOW,
        SWEEP_WORKFLOW,
        CheckResult,
        CordonOutcome,
        Incident,
        NodeInput,
        PowerRequest,
        PreflightReport,
        ShrinkOutcome,
        ShrinkRequest,
        Step,
        SweepPlan,
        Trigger,
        Workloads,
    )

_SHORT_RETRY = RetryPolicy(maximum_interval=timedelta(seconds=30))


@workflow.defn(name=NODE_WORKFLOW)
class NodeWorkflow:
    """Triage, cordon, drain, reboot or repair, stress-test and uncordon one node."""

    def __init__(self) -> None:
        self._triggers: list[Trigger] = []
        self._incident: Incident | None = None
        self._cordons = 0

    @workflow.signal
    def trigger(self, trigger: Trigger) -> None:
        """A new trigger for this node: the first starts the work, later ones join it."""
        if self._incident is not None and trigger.kind != "recover":
            self._log(f"joined by {trigger.kind}: {trigger.reason}")
        self._triggers.append(trigger)

    @workflow.query
    def incident(self) -> Incident | None:
        """The incident so far (phase, cordon count, steps)."""
        return self._incident

    @workflow.run
    async def run(self, start: NodeInput) -> Incident:
        """Handle one incident of the node, from its first trigger to a settled phase."""
        self._node, self._policy = start.node, start.policy
        await workflow.wait_condition(lambda: bool(self._triggers))
        first = self._triggers[0]
        self._incident = Incident(start.node, first.kind, first.reason, _now())
        self._log(f"{first.kind} from {first.source}: {first.reason}")
        for extra in self._triggers[1:]:  # signals that arrived with the start
            self._log(f"joined by {extra.kind}: {extra.reason}")
        outcome = await self._triage(first)
        if outcome is not None:
            await self._recover(outcome)
        return self._incident

    async def _triage(self, first: Trigger) -> CordonOutcome | None:
        if first.kind == "recover":
            return await self._short("warden.cordon_memory", CordonOutcome, self._node)
        reason = first.reason if first.kind == "fault" else await self._suspect(first)
        return None if reason is None else await self._cordon(reason)

    async def _suspect(self, first: Trigger) -> str | None:
        """Why a suspect node is cordoned after all (its check failed, or a definite fault
        joined), or None when it stays in service: held off, or cleared by its check."""
        # A run started before hold-offs existed (Warden upgraded during its check) replays
        # without the activity it never scheduled.
        if workflow.patched("suspect-hold-off"):
            until = await self._short("warden.held_off", str, self._node, first.signals)
            if until and self._fault() is None:
                self._phase("held-off")
                self._log(f"held off until {until}: a node check cleared {first.reason}")
                return None
        result = await self._check_unless_fault()
        fault = self._fault()
        if fault is not None:
            return fault.reason
        assert result is not None
        if not result.passed:
            return "node check failed: " + "; ".join(result.findings or ["no findings"])
        until = await self._short("warden.clear", str, self._node, first.reason, first.signals)
        self._phase("cleared")
        self._log(f"suspect cleared, held off until {until}" if until else "suspect cleared")
        return None

    async def _check_unless_fault(self) -> CheckResult | None:
        """The preflight check, stopped when a definite fault joins meanwhile (None then): a
        definite signal acts at once, not after a check of minutes."""
        if self._fault() is not None:
            return None
        check = asyncio.create_task(self._check("preflight", self._policy.check_timeout_s))
        await workflow.wait_condition(lambda: check.done() or self._fault() is not None)
        if check.done():
            return check.result()
        check.cancel()
        with suppress(asyncio.CancelledError, ActivityError):
            await check
        self._log("preflight stopped: a definite fault joined")
        return None

    def _fault(self) -> Trigger | None:
        """The first definite fault among the triggers."""
        return next((t for t in self._triggers if t.kind == "fault"), None)

    async def _cordon(self, reason: str) -> CordonOutcome:
        self._cordons += 1
        key = f"{workflow.info().run_id}/{self._cordons}"
        outcome = await self._short("warden.cordon", CordonOutcome, self._node, reason, key)
        assert self._incident is not None
        self._incident.recent_cordons = outcome.recent_cordons
        self._incident.escalated = self._incident.escalated or outcome.escalate
        self._phase("cordoned")
        self._log(f"cordoned ({outcome.recent_cordons} recent): {reason}")
        return outcome

    async def _recover(self, outcome: CordonOutcome) -> None:
        escalate = outcome.escalate
        for attempt in range(1, self._policy.max_attempts + 1):
            if not await self._clear_workloads():
                await self._settle("waiting-for-workloads")
                return
            if not await self._power_cycle(escalate, attempt):
                self._log(f"attempt {attempt}: the node did not come back in time")
                continue
            result = await self._check("stress", self._policy.stress_timeout_s)
            if result.passed:
                await self._short("warden.uncordon", None, self._node)
                self._phase("healthy")
                return
            failed = await self._cordon("stress test failed: " + "; ".join(result.findings))
            escalate = escalate or failed.escalate
        await self._settle("needs-human")

    async def _clear_workloads(self) -> bool:
        work = await self._short("warden.workloads", Workloads, self._node)
        if work.blocking:
            self._log(f"user pods remain: {', '.join(work.blocking)}")
            return False
        if not work.drainable:
            return True
        self._phase("draining")
        grace = self._policy.drain_grace_s
        await self._short("warden.notify_owners", None, self._node, work.drainable, grace)
        await workflow.sleep(grace)
        await self._short("warden.evict", None, work.drainable)
        timeout = self._policy.drain_timeout_s
        return await self._long("warden.await_no_workloads", bool, timeout, self._node, timeout)

    async def _power_cycle(self, escalate: bool, attempt: int) -> bool:
        action: Literal["reboot", "repair"] = "repair" if escalate else "reboot"
        self._phase("repairing" if escalate else "rebooting")
        info = workflow.info()
        # Deterministic, so a replay or a retried activity sends the same cloud request id.
        key = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{info.workflow_id}/{info.run_id}/{attempt}"))
        assert self._incident is not None
        request = PowerRequest(self._node, key, action, self._incident.reason)
        boot_id = await self._short("warden.power", str, request)
        self._log(f"{action} requested (attempt {attempt})")
        policy = self._policy
        timeout = policy.repair_timeout_s if escalate else policy.reboot_timeout_s
        return await self._long("warden.await_boot", bool, timeout, self._node, boot_id, timeout)

    async def _check(self, suite: str, timeout_s: float) -> CheckResult:
        self._phase("stress-testing" if suite == "stress" else "checking")
        name = f"{workflow.info().run_id}/{suite}/{self._cordons}"
        result = await self._long("warden.run_check", CheckResult, timeout_s,
                                  self._node, suite, name)
        self._log(f"{suite} {'passed' if result.passed else 'failed'}: {result.findings}")
        return result

    async def _settle(self, phase: str) -> None:
        await self._short("warden.set_state", None, self._node, phase)
        self._phase(phase)

    async def _short(self, name: str, result_type: Any, *args: Any) -> Any:
        return await workflow.execute_activity(
            name, args=list(args), result_type=result_type, retry_policy=_SHORT_RETRY,
            start_to_close_timeout=timedelta(seconds=self._policy.activity_timeout_s),
        )

    async def _long(self, name: str, result_type: Any, seconds: float, *args: Any) -> Any:
        return await workflow.execute_activity(
            name, args=list(args), result_type=result_type, retry_policy=_SHORT_RETRY,
            start_to_close_timeout=timedelta(seconds=seconds + self._policy.activity_timeout_s),
            heartbeat_timeout=timedelta(seconds=self._policy.heartbeat_s),
        )

    def _phase(self, phase: str) -> None:
        assert self._incident is not None
        self._incident.phase = phase
        workflow.upsert_memo({"phase": phase})

    def _log(self, what: str) -> None:
        if self._incident is not None:
            self._incident.steps.append(Step(_now(), what))


def _now() -> str:
    return workflow.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@workflow.defn(name=SWEEP_WORKFLOW)
class SweepWorkflow:
    """Run one sweep activity periodically; continue as new to bound the history."""

    @workflow.run
    async def run(self, plan: SweepPlan) -> None:
        """A sweep starts every interval (start to start: a fault waits at most one interval
        plus one sweep, however long the sweeps take); a failed sweep is logged and the next
        one runs on time."""
        for _ in range(plan.iterations):
            started = workflow.now()
            try:
                await workflow.execute_activity(
                    plan.activity,
                    start_to_close_timeout=timedelta(seconds=plan.timeout_s),
                    retry_policy=RetryPolicy(maximum_attempts=1),
                )
            except ActivityError as error:
                workflow.logger.warning("sweep %s failed: %s", plan.activity, error.cause)
            rest = plan.interval_s - (workflow.now() - started).total_seconds()
            if rest > 0:  # a sweep longer than the interval is followed by the next at once
                await workflow.sleep(rest)
        workflow.continue_as_new(plan)


@workflow.defn(name=SHRINK_WORKFLOW)
class ShrinkWorkflow:
    """Apply one shrink request (its workflow id is derived from the request id)."""

    @workflow.run
    async def run(self, request: ShrinkRequest) -> ShrinkOutcome:
        """Shrink once; a request naming no such group fails without retrying."""
        return await workflow.execute_activity(
            "warden.shrink",
            request,
            result_type=ShrinkOutcome,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(
                maximum_interval=timedelta(seconds=30), non_retryable_error_types=["ConfigError"]
            ),
        )


@workflow.defn(name=PREFLIGHT_WORKFLOW)
class PreflightWorkflow:
    """Act on one preflight report (its workflow id is derived from the report id): record it
    on the workload, and start or join the node workflow of every node it blames."""

    @workflow.run
    async def run(self, report: PreflightReport) -> list[str]:
        """The nodes reported as suspects."""
        result: list[str] = await workflow.execute_activity(
            "warden.preflight", report, result_type=list[str],
            start_to_close_timeout=timedelta(seconds=60), retry_policy=_SHORT_RETRY)
        return result
