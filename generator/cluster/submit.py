"""`gkr submit`: flags and/or a spec file -> the same spec model, defaults, templates and checks
as `gkr render` -> server-side apply (or a dry run, or a GitOps branch), then the preflight in
the placed pods, and on a fault the offer to tear the job down (seed §2.4).

`submit` is the whole workflow; what the user must see while it runs (applied objects, pods
being placed, preflight results) and the one question it may ask go through `SubmitEvents`,
which the command line implements and a caller without a terminal leaves silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from generator.cluster.argocd import refuse_if_managed
from generator.cluster.gitops import Submitted, referenced_env, submit_gitops
from generator.cluster.jobs import applied_line, apply_all, delete_job
from generator.cluster.kubectl import Kubectl
from generator.cluster.preflight import (
    exec_preflight,
    expected_pods,
    failed_nodes,
    pod_expectations,
    wait_running,
)
from generator.cluster.prepare import JobsRequest, Prepared, prepare_jobs
from generator.errors import BadRequest, CheckFailed
from generator.resolve import ResolvedJob
from runtime.identity import Label, Role
from runtime.kube import Kube, Obj

PREFLIGHT_ROLES = (Role.WORKER, Role.JOB)  # the pods on GPU nodes; a Ray head runs on a CPU one


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
    preflight: bool = True
    """Wait for the pods and run the preflight in them."""
    teardown: bool | None = None
    """On a failed preflight: tear down (True), keep (False), or ask (None)."""
    timeout_s: int = 1800
    """Seconds to wait for the pods."""
    force: bool = False
    """Apply even a job Argo CD manages."""

    def __post_init__(self) -> None:
        if (self.branch or self.base) and self.mode is not SubmitMode.GITOPS:
            raise BadRequest("--branch and --base go with --gitops")


class SubmitEvents(Protocol):
    """What a submit tells its user while it runs, and the question it may ask."""

    def say(self, line: str) -> None:
        """A change made: an object applied or deleted (stdout)."""

    def note(self, line: str) -> None:
        """A default taken, pods being placed (stderr)."""

    def checked(self, results: list[dict[str, Any]]) -> None:
        """The preflight results of one job, before any question about them."""

    def confirm(self, question: str) -> bool:
        """Yes or no."""


class Silent:
    """Events for a caller without a user: nothing said, every question answered no."""

    def say(self, line: str) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def checked(self, results: list[dict[str, Any]]) -> None:
        pass

    def confirm(self, question: str) -> bool:
        return False


@dataclass(frozen=True)
class SubmitOutcome:
    """What a submit did: its jobs and manifests (a dry run prints them), what the server
    holds after the apply, the --gitops commit, and the preflight results."""

    mode: SubmitMode
    jobs: list[ResolvedJob]
    manifests: list[list[Obj]]
    applied: list[Obj] = field(default_factory=list)
    commit: Submitted | None = None
    preflight: list[dict[str, Any]] = field(default_factory=list)


def submit_job(request: SubmitRequest, events: SubmitEvents | None = None) -> SubmitOutcome:
    """The whole `gkr submit`; raises CheckFailed after a failed preflight (once the user
    was asked about tearing the job down)."""
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
    """Refuse Argo CD's jobs (before anything is uploaded), upload, apply, check."""
    apis = [Kube.connect(job.cluster.kube_context) for job in prepared.jobs]
    if not request.force:
        for api, job in zip(apis, prepared.jobs, strict=True):
            _refuse_managed(api, request, job)
    if prepared.package is not None:
        prepared.package.upload()
    applied: list[Obj] = []
    results: list[dict[str, Any]] = []
    for api, job, documents in zip(apis, prepared.jobs, prepared.manifests, strict=True):
        for obj in apply_all(api, documents):
            events.say(applied_line(obj))
            applied.append(obj)
        if request.preflight:
            results += _preflight(api, job, request, events)
    return SubmitOutcome(request.mode, prepared.jobs, prepared.manifests, applied,
                         preflight=results)


def _refuse_managed(api: Kube, request: SubmitRequest, job: ResolvedJob) -> None:
    live = api.find(api.kind(job.traits.api_version, job.traits.object_kind), job.name,
                    namespace=job.namespace)
    refuse_if_managed(request.jobs.root, job.cluster.name, job.namespace, job.name, live,
                      "apply")


def _preflight(api: Kube, job: ResolvedJob, request: SubmitRequest,
               events: SubmitEvents) -> list[dict[str, Any]]:
    """Check the placed GPU pods; on a fault, tear the job down if the user wants."""
    pods = wait_running(api, job.namespace, job.name, expected_pods(job), request.timeout_s,
                        events.note)
    kubectl = Kubectl(job.cluster.kube_context, job.namespace)
    expect = pod_expectations(job)
    results = [exec_preflight(kubectl, pod, expect) for pod in pods
               if (pod["metadata"].get("labels") or {}).get(Label.ROLE) in PREFLIGHT_ROLES]
    events.checked(results)
    failed = failed_nodes(results)
    if not failed:
        return results
    teardown = request.teardown
    if teardown is None:
        teardown = events.confirm(f"tear down {job.kind} {job.namespace}/{job.name}?")
    if teardown:
        delete_job(api, job.traits, job.name, job.namespace)
        events.say(f"deleted {job.kind} {job.namespace}/{job.name}")
    raise CheckFailed(f"preflight failed on {', '.join(failed)}")


def start_dev_pod(api: Kube, request: JobsRequest, timeout_s: int,
                  events: SubmitEvents) -> list[Obj]:
    """`gkr shell` on a name with no pods: a Job running the request's command until its
    deadline, and its pod once it runs."""
    prepared = prepare_jobs(request)
    job = prepared.jobs[0]
    for obj in apply_all(api, prepared.manifests[0]):
        events.say(f"started development pod: {obj['kind']} {job.namespace}/{job.name}")
    return wait_running(api, job.namespace, job.name, 1, timeout_s, events.note)
