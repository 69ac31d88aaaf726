"""Into a job's pods: `gkr shell` (starting a development pod when none exists), `gkr cp` and
`gkr port-forward`, all through the real kubectl (generator.cluster.kubectl)."""

from __future__ import annotations

from dataclasses import dataclass, field

from generator.cluster.jobs import connect
from generator.cluster.kubectl import SERVICES, Kubectl, main_container, select_pod
from generator.cluster.prepare import JobsRequest, SpecFlags
from generator.cluster.submit import SubmitEvents, start_dev_pod
from generator.cluster.target import Asked
from generator.errors import BadRequest
from runtime.identity import JobKind, selector
from runtime.kube import POD, Obj


@dataclass(frozen=True)
class PodRequest:
    """One pod of a job: by role (the head by default, else the Job's pod) or worker rank."""

    asked: Asked
    role: str | None = None
    rank: int | None = None


def pod_of(request: PodRequest) -> tuple[Kubectl, Obj]:
    """kubectl bound to the job's cluster and namespace, and the pod meant."""
    target, api = connect(request.asked)
    pods = api.list(POD, namespace=target.namespace, labels=selector(job=str(request.asked.job)))
    return (Kubectl(target.cluster.kube_context, target.namespace),
            select_pod(pods, role=request.role, rank=request.rank))


def copy(request: PodRequest, source: str, destination: str) -> None:
    """`kubectl cp`; the pod side is written `:PATH`."""
    kubectl, pod = pod_of(request)
    name = pod["metadata"]["name"]
    source, destination = (f"{name}{p}" if p.startswith(":") else p
                           for p in (source, destination))
    kubectl.run(kubectl.cp_argv(source, destination, main_container(pod)), capture=True)


def port_forward(asked: Asked, service: str, local_port: int | None) -> int:
    """Forward a Ray head port to localhost until interrupted; kubectl's exit code."""
    if service not in SERVICES:
        raise BadRequest(f"--service {service!r}: one of {', '.join(SERVICES)}")
    kubectl, pod = pod_of(PodRequest(asked, role="head"))
    ports = [f"{local_port or SERVICES[service]}:{SERVICES[service]}"]
    return kubectl.run(kubectl.port_forward_argv(pod["metadata"]["name"], ports)).returncode


@dataclass(frozen=True)
class DevPod:
    """The development pod `gkr shell` starts for a name that has no pods."""

    accelerator: str | None = None
    gpus: int | None = None
    image: str = "devbox"
    owner: str | None = None
    deadline: str = "8h"


@dataclass(frozen=True)
class ShellRequest:
    """`gkr shell NAME`: which pod, which shell, and the development pod to start if needed."""

    asked: Asked
    rank: int | None = None
    command: str = "/bin/bash"
    dev: DevPod = field(default_factory=DevPod)
    timeout_s: int = 900


def shell(request: ShellRequest, events: SubmitEvents) -> int:
    """An interactive shell in the job's pod (kubectl exec -it); kubectl's exit code."""
    target, api = connect(request.asked)
    pods = api.list(POD, namespace=target.namespace, labels=selector(job=str(request.asked.job)))
    if not pods:
        pods = start_dev_pod(api, _dev_job(request, target.cluster.name, target.namespace),
                             request.timeout_s, events)
    pod = select_pod(pods, rank=request.rank)
    kubectl = Kubectl(target.cluster.kube_context, target.namespace)
    argv = kubectl.exec_argv(pod["metadata"]["name"], [request.command], main_container(pod),
                             True)
    return kubectl.run(argv).returncode


def _dev_job(request: ShellRequest, cluster: str, namespace: str) -> JobsRequest:
    dev = request.dev
    flags = SpecFlags(name=request.asked.job, kind=JobKind.JOB.value, cluster=cluster,
                      namespace=namespace, image=dev.image, cmd="sleep infinity",
                      deadline=dev.deadline, accelerator=dev.accelerator, gpus=dev.gpus,
                      owner=dev.owner)
    return JobsRequest(request.asked.root, flags)
