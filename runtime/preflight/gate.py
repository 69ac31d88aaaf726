"""The preflight that gates a RayJob: `python -m runtime.preflight.gate` is its entrypoint.

It runs as the job's Ray driver, inside the cluster, before the job's own command: so it
holds for a job applied by `gkr submit` and one Argo CD synced alike, and depends on no
terminal. Each attempt runs every worker pod's own checks and an all-reduce between all the
pods (runtime.preflight.allreduce) against the accelerator's bus-bandwidth threshold. A pass
runs the job's cmd (GKR_ENTRYPOINT) with /bin/sh -c, as Ray would have; a failure is
recorded and its nodes reported to Warden (runtime.preflight.report), and then, per the
job's policy, the blamed pods are replaced and the gate runs again, or the driver exits 1:
the RayJob fails and KubeRay deletes its RayCluster (shutdownAfterJobFinishes).

Exit status: 1 the preflight failed, 2 its settings are invalid; else the cmd's.
"""

from __future__ import annotations

import os
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from runtime.errors import ConfigError
from runtime.identity import Env
from runtime.preflight.config import GateConfig, GatePolicy, load_gate
from runtime.preflight.report import Reporter, log, reporter_from_env
from runtime.preflight.result import GateRecord, Next, Suspect
from runtime.preflight.tasks import PodOutcome, Pods, PodSlot, PodsMissing, PodTask, Rendezvous

SHELL = "/bin/sh"  # runs the cmd as Ray runs an entrypoint: one shell command line


@dataclass(frozen=True)
class Verdict:
    """What one attempt found."""

    passed: bool
    busbw_gbps: float | None
    suspects: list[Suspect]
    message: str


def _own_reason(outcome: PodOutcome) -> str | None:
    """Why the pod itself failed (its checks, its GPUs), if it did."""
    errors = [f"{f.check}: {f.message}" for f in outcome.local.findings if f.severity == "error"]
    if outcome.own_fault and outcome.error:
        errors.append(f"all-reduce: {outcome.error}")
    return "; ".join(errors) or None


def _slow_pods(outcomes: list[PodOutcome], pods: int, threshold: float) -> dict[int, str]:
    """Pods whose both ring pairs were below the threshold (runtime.preflight.allreduce)."""
    pairs: dict[str, float] = {}
    for outcome in outcomes:
        for key, value in (outcome.ranks.pairs if outcome.ranks else {}).items():
            pairs[key] = min(value, pairs.get(key, value))
    slow = {}
    for pod in range(pods):
        keys = (f"{(pod - 1) % pods}-{pod}", f"{pod}-{(pod + 1) % pods}")
        found = [pairs[k] for k in keys if k in pairs]
        if len(found) == 2 and max(found) < threshold:
            slow[pod] = (f"all-reduce with each neighbour {found[0]:.3g} and {found[1]:.3g} "
                         f"GB/s, below {threshold:g}")
    return slow


def judge(config: GateConfig, slots: list[PodSlot],
          outcomes: list[PodOutcome | None]) -> Verdict:
    """Pass, or fail with the pods to blame. A pod's own failure always blames it; a
    collective's (silence, slow links) only when it singles out fewer than all the pods:
    a fault everywhere is the job's or the fabric's, not a node's."""
    answered = [o for o in outcomes if o is not None]
    own = {o.index: why for o in answered if (why := _own_reason(o))}
    shared = {i: "gave no result in time" for i, o in enumerate(outcomes) if o is None}
    figures = [o.ranks.busbw_gbps for o in answered if o.ranks and o.ranks.busbw_gbps is not None]
    busbw = min(figures) if len(figures) == len(answered) and figures else None
    threshold = config.min_busbw_gbps
    slow = threshold is not None and busbw is not None and busbw < threshold
    if slow and threshold is not None:
        shared |= _slow_pods(answered, len(slots), threshold)
    if len(shared) == len(slots) > 1:
        shared = {}
    blamed = shared | own
    suspects = [Suspect(node=slots[i].node, pod=slots[i].pod, reason=why)
                for i, why in sorted(blamed.items())]
    failures = _failures(config, outcomes, busbw, slow)
    return Verdict(not failures and not blamed, busbw, suspects,
                   _message(config, len(slots), busbw, failures, suspects))


def _failures(config: GateConfig, outcomes: list[PodOutcome | None], busbw: float | None,
              slow: bool) -> list[str]:
    """What went wrong overall, for the message."""
    found = []
    if any(o is None for o in outcomes):
        found.append("a pod gave no result in time")
    lost = sorted({o.error for o in outcomes if o and o.error and not o.own_fault})
    found += [f"the all-reduce failed: {_short(error)}" for error in lost[:1]]
    if any(o and o.ranks and not o.ranks.exact for o in outcomes):
        found.append("the all-reduce gave a WRONG RESULT")
    if slow:
        found.append(f"bus bandwidth {busbw:.3g} GB/s is below {config.min_busbw_gbps:g}")
    if any(o and _own_reason(o) for o in outcomes):
        found.append("a pod failed on its own")
    return found


def _short(error: str, limit: int = 160) -> str:
    """An error's first sentence, at most `limit` characters (gloo's run to a paragraph)."""
    first = error.split(". ", 1)[0]
    return first if len(first) <= limit else first[:limit - 1] + "…"


def _message(config: GateConfig, pods: int, busbw: float | None, failures: list[str],
             suspects: list[Suspect]) -> str:
    ranks = pods * config.ranks_per_pod
    measured = f"{busbw:.3g} GB/s bus bandwidth" if busbw is not None else "no bandwidth"
    threshold = f" (threshold {config.min_busbw_gbps:g})" if config.min_busbw_gbps else ""
    head = f"all-reduce over {pods} pods ({ranks} ranks, {config.backend}): {measured}{threshold}"
    if not failures and not suspects:
        return head
    blame = (", ".join(f"{s.node} ({s.reason})" for s in suspects) if suspects
             else "not attributable to one node")
    return f"{head}; {'; '.join(failures)}; suspect: {blame}"


def attempt(config: GateConfig, pods: Pods, slots: list[PodSlot]) -> Verdict:
    """One run over these pods: pod 0 hosts the rendezvous."""
    rendezvous = Rendezvous(
        master=slots[0].address, port=pods.free_port(slots[0]), pods=len(slots),
        ranks_per_pod=config.ranks_per_pod, backend=config.backend, mib=config.message_mib,
        iterations=config.iterations, timeout_s=config.timeout_s / 2,
        min_busbw_gbps=config.min_busbw_gbps)
    tasks = [PodTask(index=i, node=s.node, pod=s.pod, checks=config.pod_checks,
                     rendezvous=rendezvous) for i, s in enumerate(slots)]
    return judge(config, slots, pods.run(tasks, slots, config.timeout_s))


def next_step(verdict: Verdict, number: int, policy: GatePolicy, can_replace: bool) -> Next:
    """Run the cmd, retry on replaced pods (there are pods to blame, attempts left and
    someone to replace them), or tear down."""
    if verdict.passed:
        return "run"
    retry = policy.on_failure == "retry" and number < policy.attempts and bool(verdict.suspects)
    return "retry" if retry and can_replace else "teardown"


def _record(config: GateConfig, number: int, verdict: Verdict, step: Next) -> GateRecord:
    return GateRecord(
        passed=verdict.passed, attempt=number, attempts=config.policy.attempts,
        at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), pods=config.pods,
        backend=config.backend, busbw_gbps=verdict.busbw_gbps,
        min_busbw_gbps=config.min_busbw_gbps, suspects=verdict.suspects, next=step,
        message=verdict.message)


def run_gate(config: GateConfig, pods: Pods, reporter: Reporter) -> GateRecord:
    """Attempts until one passes or the policy says stop; every result is reported."""
    avoid: set[str] = set()
    for number in range(1, config.policy.attempts + 1):
        wait = config.start_timeout_s if number == 1 else config.policy.replacement_timeout_s
        try:
            verdict = attempt(config, pods, pods.wait(config.pods, wait, avoid))
        except PodsMissing as error:
            verdict = Verdict(False, None, [], str(error))
        step = next_step(verdict, number, config.policy, reporter.can_replace)
        record = _record(config, number, verdict, step)
        reporter.record(record)
        doomed = [s.pod for s in verdict.suspects]
        if step != "retry":
            return record
        if not reporter.replace(config.group, doomed, number):
            record = record.model_copy(update={"next": "teardown"})
            reporter.record(record)
            return record
        avoid |= set(doomed)
    raise AssertionError("next_step tears down on the last attempt")


def main() -> int:
    try:
        config = load_gate(os.environ.get(Env.PREFLIGHT_GATE))
        command = os.environ.get(Env.ENTRYPOINT) or ""
        if not command.strip():
            raise ConfigError("", "not set: no command to run", f"${Env.ENTRYPOINT}")
    except ConfigError as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 2
    from runtime.preflight.placement import ray_pods  # Ray, only once the settings are good

    reporter = reporter_from_env(config.warden_task_queue, uuid.uuid4().hex[:12])
    try:
        with ray_pods(config.checks.gpus) as pods:
            record = run_gate(config, pods, reporter)
    except ConnectionError as error:  # no Ray cluster to gate: nothing may run unchecked
        log(f"FAILED: cannot reach the job's Ray cluster: {error}")
        return 1
    if not record.passed:
        log(f"FAILED, tearing down: {record.message}")
        return 1
    log(f"passed: {record.message}")
    sys.stdout.flush()
    os.execv(SHELL, [SHELL, "-c", command])
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main())
