"""A job's live objects: find, apply, delete (guarded as `gkr delete` is), and its pods' logs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from generator.cluster.argocd import refuse_if_managed
from generator.cluster.kubectl import main_container, select_pod
from generator.cluster.target import Asked, Target, find_target
from generator.errors import BadRequest
from generator.kinds import KINDS, KindTraits, sentinel_name
from runtime.identity import Role, selector
from runtime.kube import DEPLOYMENT, POD, Kube, Obj


def connect(asked: Asked) -> tuple[Target, Kube]:
    """Where the command acts (generator.cluster.target) and that cluster's API."""
    target = find_target(asked)
    return target, Kube.connect(target.cluster.kube_context)


def find_job(api: Kube, name: str, namespace: str) -> tuple[KindTraits, Obj] | None:
    """The top-level object of job `name` (any kind) and its kind's traits; None if absent."""
    for traits in KINDS.values():
        found = api.find(api.kind(traits.api_version, traits.object_kind), name,
                         namespace=namespace)
        if found is not None:
            return traits, found
    return None


def delete_job(api: Kube, traits: KindTraits, name: str, namespace: str) -> None:
    """Delete a job's top-level object and, for a RayCluster, its sentinel (the Deployment is
    not owned by the RayCluster, so Kubernetes would not collect it)."""
    if Role.SENTINEL in traits.roles and api.find(DEPLOYMENT, sentinel_name(name),
                                                  namespace=namespace):
        api.delete(DEPLOYMENT, sentinel_name(name), namespace=namespace)
    api.delete(api.kind(traits.api_version, traits.object_kind), name, namespace=namespace)


def apply_all(api: Kube, documents: list[Obj]) -> list[Obj]:
    """Apply in order (the RayCluster before its sentinel); returns what the server holds."""
    return [api.apply(document) for document in documents]


def applied_line(obj: Obj) -> str:
    meta = obj["metadata"]
    return (f"applied {obj['kind']} {meta['namespace']}/{meta['name']} "
            f"(resourceVersion {meta['resourceVersion']})")


@dataclass(frozen=True)
class DeleteRequest:
    """`gkr delete NAME`: which job, and what the user allowed."""

    asked: Asked
    raycluster: bool = False
    """--raycluster: a persistent RayCluster may be deleted."""
    yes: bool = False
    """--yes: do not ask before deleting a persistent RayCluster."""
    force: bool = False
    """--force: delete even a job Argo CD manages."""


@dataclass(frozen=True)
class Deleted:
    """What `delete` did: `done` is False when the user kept it at the confirmation."""

    kind: str
    namespace: str
    name: str
    done: bool


def delete(request: DeleteRequest, confirm: Callable[[str], bool]) -> Deleted:
    """Delete a job; a persistent RayCluster only with `raycluster` and `confirm`ed (unless
    `yes`); one Argo CD manages only with `force`."""
    target, api = connect(request.asked)
    name, ns = str(request.asked.job), target.namespace
    found = find_job(api, name, ns)
    if found is None:
        raise BadRequest(f"no rayjob, raycluster or job named {name!r} in {ns}")
    traits, live = found
    if not request.force:
        refuse_if_managed(target.root, target.cluster.name, ns, name, live, "delete")
    if traits.persistent:
        if not request.raycluster:
            raise BadRequest(f"{name} is a persistent RayCluster: pass --raycluster to delete it")
        if not request.yes and not confirm(f"delete RayCluster {ns}/{name} and its sentinel?"):
            return Deleted(traits.object_kind, ns, name, done=False)
    delete_job(api, traits, name, ns)
    return Deleted(traits.object_kind, ns, name, done=True)


@dataclass(frozen=True)
class LogsRequest:
    """`gkr logs NAME`: whose log, and how much of it."""

    asked: Asked
    follow: bool = False
    pod: str | None = None
    rank: int | None = None
    tail: int | None = None


def job_logs(request: LogsRequest) -> Iterator[str]:
    """The log lines of the job's head (or Job pod), a named pod, or a worker by rank."""
    target, api = connect(request.asked)
    pods = api.list(POD, namespace=target.namespace, labels=selector(job=str(request.asked.job)))
    chosen = select_pod(pods, rank=request.rank, name=request.pod)
    yield from api.logs(chosen["metadata"]["name"], namespace=target.namespace,
                        container=main_container(chosen), follow=request.follow,
                        tail=request.tail)
