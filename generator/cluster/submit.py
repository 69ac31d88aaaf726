"""`gkr submit`: flags and/or a spec file -> the same spec model, defaults, templates and checks
as `gkr render` -> server-side apply (or a dry run, or a GitOps branch). A RayJob's preflight
runs in the cluster before its cmd (seed §2.4; generator.pods renders the gate), so nothing
waits on the submitter's terminal; `--wait` only watches for the gate's result.

`submit_job` is the whole workflow; what the user must see while it runs (applied objects,
the gate's attempts) goes through `SubmitEvents`, which the command line implements and a
caller without a terminal leaves silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from generator.cluster.argocd import refuse_if_managed
from generator.cluster.gitops import Submitted, referenced_env, submit_gitops
from generator.cluster.jobs import applied_line, apply_all
from generator.cluster.preflight import wait_preflight, wait_running
from generator.cluster.prepare import JobsRequest, Prepared, prepare_jobs
from generator.cluster.status import preflight_line
from generator.errors import BadRequest, CheckFailed
from generator.pods import gated
from generator.resolve import ResolvedJob
from runtime.kube import Kube, Obj
from runtime.preflight.result import GateRecord


class SubmitMode(StrEnum):
    APPLY = "apply"
    DRY_RUN = "dry-run"
    GITOPS = "gitops"


@dataclass(frozen=True)
class SubmitRequest:
    """What `gkr submit` was asked, frozen at the boundary."""

    jobs: JobsRequest
    """The spec file and/or spec fields given as flags."""
    mode: SubmitMode = SubmitMode.APPLY
    """Apply to the cluster, print the manifests only, or commit them on a branch."""
    branch: str | None = None
    """--gitops: the new branch (default gkr/submit-TEAM-NAME)."""
    base: str | None = None
    """--gitops: the commit the branch starts from (default HEAD)."""
    wait: bool = False
    """Watch a RayJob until its preflight gate has a result (CheckFailed if it failed)."""
    timeout_s: int = 1800
    """Seconds --wait watches."""
    force: bool = False
    """Apply even a job Argo CD manages."""

    def __post_init__(self) -> None:
        if (self.branch or self.base) and self.mode is not SubmitMode.GITOPS:
            raise BadRequest("--branch and --base go with --gitops")


class SubmitEvents(Protocol):
    """What a submit tells its user while it runs."""

    def say(self, line: str) -> None:
        """A change made or a result: an object applied, the gate's verdict (stdout)."""

    def note(self, line: str) -> None:
        """A default taken, pods being placed, the gate's attempts (stderr)."""


class Silent:
    """Events for a caller without a user: nothing said."""

    def say(self, line: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass


@dataclass(frozen=True)
class SubmitOutcome:
    """What a submit did: its jobs and manifests (a dry run prints them), what the server
    holds after the apply, the --gitops commit, and with --wait the preflight gates' results."""

    mode: SubmitMode
    jobs: list[ResolvedJob]
    manifests: list[list[Obj]]
    applied: list[Obj] = field(default_factory=list)
    commit: Submitted | None = None
    preflight: list[GateRecord] = field(default_factory=list)


def submit_job(request: SubmitRequest, events: SubmitEvents | None = None) -> SubmitOutcome:
    """The whole `gkr submit`; with --wait, raises CheckFailed after a failed preflight (the
    job has acted on it by its own policy already)."""
    events = events or Silent()
    prepared = prepare_jobs(request.jobs)
    for note in prepared.notes:
        events.note(note)
    if request.mode is SubmitMode.DRY_RUN:
        return SubmitOutcome(request.mode, prepared.jobs, prepared.manifests)
    if request.mode is SubmitMode.GITOPS:
        return SubmitOutcome(request.mode, prepared.jobs, prepared.manifests,
                             commit=_commit(request, prepared))
    return _apply(request, prepared, events)


def _commit(request: SubmitRequest, prepared: Prepared) -> Submitted:
    if len(prepared.jobs) > 1:
        raise BadRequest("--gitops commits one job; a DiLoCo experiment renders to several "
                         "clusters: add its spec under jobs/<team>/, run `gkr render` and "
                         "open a pull request with both")
    job = prepared.jobs[0]
    if prepared.package is not None:  # the job runs once merged: its code must be there then
        prepared.package.upload()
    env = request.jobs.flags.env_file
    env_source = env.resolve() if env else referenced_env(job, request.jobs.spec_file)
    return submit_gitops(request.jobs.root, job, env_source, request.branch, request.base)


def _apply(request: SubmitRequest, prepared: Prepared, events: SubmitEvents) -> SubmitOutcome:
    """Refuse Argo CD's jobs (before anything is uploaded), upload, apply, maybe watch."""
    apis = [Kube.connect(job.cluster.kube_context) for job in prepared.jobs]
    if not request.force:
        for api, job in zip(apis, prepared.jobs, strict=True):
            _refuse_managed(api, request, job)
    if prepared.package is not None:
        prepared.package.upload()
    applied: list[Obj] = []
    results: list[GateRecord] = []
    for api, job, documents in zip(apis, prepared.jobs, prepared.manifests, strict=True):
        for obj in apply_all(api, documents):
            events.say(applied_line(obj))
            applied.append(obj)
        if gated(job):
            events.note(f"the preflight runs in the cluster before the cmd; `gkr status "
                        f"{job.name}` shows its result")
            if request.wait:
                results.append(_watch(api, job, request.timeout_s, events))
    return SubmitOutcome(request.mode, prepared.jobs, prepared.manifests, applied,
                         preflight=results)


def _refuse_managed(api: Kube, request: SubmitRequest, job: ResolvedJob) -> None:
    live = api.find(api.kind(job.traits.api_version, job.traits.object_kind), job.name,
                    namespace=job.namespace)
    refuse_if_managed(request.jobs.root, job.cluster.name, job.namespace, job.name, live,
                      "apply")


def _watch(api: Kube, job: ResolvedJob, timeout_s: int, events: SubmitEvents) -> GateRecord:
    """Seed §2.4, watched from here: the gate's final result; a failure is CheckFailed."""
    record = wait_preflight(api, job, timeout_s, events.note)
    events.say(f"preflight: {preflight_line(record)}")
    if not record.passed:
        raise CheckFailed(f"preflight of {job.name} failed: {record.message}")
    return record


def start_dev_pod(api: Kube, request: JobsRequest, timeout_s: int,
                  events: SubmitEvents) -> list[Obj]:
    """`gkr shell` on a name with no pods: a Job running the request's command until its
    deadline, and its pod once it runs."""
    prepared = prepare_jobs(request)
    job = prepared.jobs[0]
    for obj in apply_all(api, prepared.manifests[0]):
        events.say(f"started development pod: {obj['kind']} {job.namespace}/{job.name}")
    return wait_running(api, job.namespace, job.name, 1, timeout_s, events.note)
