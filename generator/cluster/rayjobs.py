"""Work on a running persistent RayCluster through Ray's own job API (seed §4.3): submit a job
(its command, working directory and environment, shipped as `ray job submit` ships them),
list the cluster's jobs with their states, stream or download a job's log, stop one.

The head's dashboard is reached through a port-forward that gkr opens and closes itself
(generator.cluster.kubectl.forwarded), or at an address given (the head service, from inside
the cluster). A job submitted here carries the run identity of any GKR run (the GKR_*
variables of runtime.identity, its submission id as GKR_RUN), so its telemetry rows, crash
bundle and sample ledger land under the cluster, team and job they belong to.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from ray.job_submission import JobStatus, JobSubmissionClient, JobType

from generator.cluster.jobs import connect
from generator.cluster.kubectl import Kubectl, forwarded, select_pod
from generator.cluster.package import local_folder
from generator.cluster.prepare import read_env_file
from generator.cluster.target import Asked, Target
from generator.errors import BadRequest, InvalidInput, Problem, ToolFailed
from generator.names import env_name_problem, env_value_problem
from generator.pods import DASHBOARD_PORT
from runtime.identity import JobKind, Label, Workload, selector
from runtime.kube import POD, RAYCLUSTER, Obj

T = TypeVar("T")
# What Ray's job API says when the request, not the head, is wrong: an unknown job id (404),
# a submission id already taken.
USER_ERRORS = ("does not exist", "404", "already exists")


@dataclass(frozen=True)
class HeadRequest:
    """Which RayCluster, and how to reach its head's dashboard."""

    asked: Asked
    """The RayCluster's name and the scope flags."""
    address: str | None = None
    """The dashboard's URL (e.g. http://NAME-head-svc.NS.svc:8265 from inside the cluster);
    None: a port-forward to the head pod."""


@dataclass(frozen=True)
class Head:
    """A reachable head: where it is, its RayCluster object, and its job API."""

    target: Target
    raycluster: Obj
    client: JobSubmissionClient

    @property
    def name(self) -> str:
        return str(self.raycluster["metadata"]["name"])


@contextmanager
def reach(request: HeadRequest) -> Iterator[Head]:
    """The head's job API while the block runs (the port-forward, if any, closed after)."""
    target, api = connect(request.asked)
    name = str(request.asked.job)
    raycluster = api.find(RAYCLUSTER, name, namespace=target.namespace)
    if raycluster is None:
        raise BadRequest(f"no RayCluster named {name!r} in {target.namespace}: `gkr submit` "
                         "one (kind raycluster) first")
    if request.address:
        yield Head(target, raycluster, _client(request.address))
        return
    pods = api.list(POD, namespace=target.namespace, labels=selector(job=name))
    head = select_pod(pods, role="head")
    kubectl = Kubectl(target.cluster.kube_context, target.namespace)
    with forwarded(kubectl, head["metadata"]["name"], DASHBOARD_PORT) as url:
        yield Head(target, raycluster, _client(url))


def _client(address: str) -> JobSubmissionClient:
    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError) as error:  # Ray raises both for an unreachable head
        raise ToolFailed(f"the Ray head's job API at {address}: {error}") from None


@dataclass(frozen=True)
class RayJobRequest:
    """`gkr ray submit NAME --cmd …`: a job for a running RayCluster."""

    head: HeadRequest
    entrypoint: str
    """The shell command the job runs (on the head, as `ray job submit` does)."""
    working_dir: str | None = None
    """A local folder (inside the repository or the current directory), zipped and uploaded
    by Ray's job API; or a URI Ray fetches (gs://…)."""
    env_file: Path | None = None
    """YAML file of environment variables (NAME: "value")."""
    submission_id: str | None = None
    """The job's id (default: NAME-<random>); also its run id (GKR_RUN)."""
    metadata: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.entrypoint.strip():
            raise BadRequest("--cmd: give the command the job runs")


@dataclass(frozen=True)
class RayJobRow:
    """One job of a RayCluster as Ray's job API reports it."""

    id: str
    status: str
    entrypoint: str
    created: datetime | None
    ended: datetime | None
    message: str


def submit_to(request: RayJobRequest) -> str:
    """Submit the job; its submission id."""
    with reach(request.head) as head:
        job_id = request.submission_id or f"{head.name}-{uuid.uuid4().hex[:8]}"
        runtime_env = _runtime_env(request, head, job_id)
        return _call(head, lambda: head.client.submit_job(
            entrypoint=request.entrypoint, submission_id=job_id, runtime_env=runtime_env,
            metadata=request.metadata))


def _runtime_env(request: RayJobRequest, head: Head, job_id: str) -> dict[str, Any]:
    """Ray's runtime_env: the user's variables under the run identity (GKR_* are GKR's)."""
    env = _user_env(request.env_file, head.target.root) | identity_env(head, job_id)
    runtime_env: dict[str, Any] = {"env_vars": env}
    if request.working_dir:
        runtime_env["working_dir"] = _working_dir(request.working_dir, head.target.root)
    return runtime_env


def identity_env(head: Head, run: str) -> dict[str, str]:
    """What the job learns about itself: the RayCluster's workload identity, with the
    submission as its run (runtime.identity.Workload, the one source of these names)."""
    labels = head.raycluster["metadata"].get("labels") or {}
    team = labels.get(Label.TEAM) or head.target.cluster.team_of_namespace(
        head.target.namespace) or ""
    workload = Workload(head.target.cluster.name, head.target.namespace, team, head.name,
                        JobKind.RAYCLUSTER, run=run)
    return workload.env()


def _user_env(path: Path | None, root: Path) -> dict[str, str]:
    """The env file's variables, checked by the rules a spec's `env` follows."""
    if path is None:
        return {}
    env, lines = read_env_file(path, root)
    problems = [Problem(str(path), lines.get((name,)), str(name), why)
                for name, value in env.items()
                if (why := env_name_problem(name) or env_value_problem(value))]
    if problems:
        raise InvalidInput(problems)
    return env


def _working_dir(value: str, root: Path) -> str:
    if "://" in value:
        return value
    folder = local_folder(value, [root, Path.cwd()])
    if folder is None:
        raise InvalidInput([Problem("command line", None, "--working-dir",
                                    f"{value}: no such folder here (a running RayCluster "
                                    "gets a local folder or a URI)")])
    return str(folder)


def list_ray_jobs(request: HeadRequest) -> list[RayJobRow]:
    """The jobs submitted to the cluster (not interactive drivers), oldest first."""
    with reach(request) as head:
        jobs = _call(head, head.client.list_jobs)
    rows = [RayJobRow(str(j.submission_id), str(j.status.value), j.entrypoint,
                      _time(j.start_time), _time(j.end_time), j.message or "")
            for j in jobs if j.type == JobType.SUBMISSION and j.submission_id]
    return sorted(rows, key=lambda row: (row.created or datetime.min.replace(tzinfo=UTC)))


def ray_job_status(request: HeadRequest, job_id: str) -> str:
    with reach(request) as head:
        return str(_call(head, lambda: head.client.get_job_status(job_id)).value)


def ray_job_log(request: HeadRequest, job_id: str, follow: bool = False) -> Iterator[str]:
    """The job's log: all of it so far, or (`follow`) streamed until the job ends."""
    with reach(request) as head:
        _call(head, lambda: head.client.get_job_info(job_id))  # an unknown id is an error
        if not follow:
            yield _call(head, lambda: head.client.get_job_logs(job_id))
            return
        yield from _drive(head.client.tail_job_logs(job_id))


def stop_ray_job(request: HeadRequest, job_id: str) -> str:
    """Stop the job; its status then (a finished job stays as it ended)."""
    with reach(request) as head:
        status = _call(head, lambda: head.client.get_job_status(job_id))
        if not status.is_terminal():
            _call(head, lambda: head.client.stop_job(job_id))
            status = JobStatus.STOPPED
        return str(status.value)


def _call(head: Head, action: Any) -> Any:
    """One job API call; Ray's errors become GKR's (an unknown job id is the user's)."""
    try:
        return action()
    except RuntimeError as error:
        text = str(error)
        if any(mark in text for mark in USER_ERRORS):
            raise BadRequest(f"{head.name}: {_said(text)}") from None
        raise ToolFailed(f"the Ray head of {head.name}: {_said(text)}") from None
    except ConnectionError as error:
        raise ToolFailed(f"the Ray head of {head.name}: {error}") from None


def _said(text: str) -> str:
    """The line of a job API error that says what went wrong: Ray's answer may carry the
    server's traceback, whose last line is the error itself."""
    lines = [line.strip() for line in text.splitlines() if line.strip().strip(".")]
    marked = [line for line in lines if any(mark in line for mark in USER_ERRORS)]
    return (marked or lines or [text])[-1]


def _drive(chunks: AsyncIterator[T]) -> Iterator[T]:
    """An async iterator (Ray's log tail) read one item at a time on a private event loop."""
    loop = asyncio.new_event_loop()
    try:
        while True:
            try:
                yield loop.run_until_complete(chunks.__anext__())
            except StopAsyncIteration:
                return
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:  # an abandoned tail closes its HTTP session
            loop.run_until_complete(aclose())
        loop.close()


def _time(millis: int | None) -> datetime | None:
    return datetime.fromtimestamp(millis / 1000, UTC) if millis else None
