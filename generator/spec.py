"""The job spec: what a researcher writes in `jobs/<team>/<name>.yaml` or passes as flags.

Specs are hardware-agnostic: they name an accelerator and per-pod resources; every platform
fact is resolved later from the catalog (see `generator.resolve`).
"""

from __future__ import annotations

import shlex
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from generator.units import CpuCount, Duration, Quantity
from runtime.diloco.config import Merge, Mode, OuterOptimizer

Kind = Literal["rayjob", "raycluster", "job"]
KINDS: tuple[Kind, ...] = ("rayjob", "raycluster", "job")


def _check_command(value: str) -> str:
    """A command is one shell command line, the same for every kind (see JobSpec.cmd)."""
    if not value.strip():
        raise ValueError("an empty command; give the command line to run")
    if "\0" in value:
        raise ValueError("a NUL character cannot be part of a command line")
    try:
        # POSIX shell quoting, as /bin/sh reads it; comments may hold any quote.
        shlex.split(value, comments=True)
    except ValueError as error:
        raise ValueError(f"not a valid shell command line: {str(error).lower()}") from None
    return value


Command = Annotated[str, AfterValidator(_check_command)]


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, use_attribute_docstrings=True
    )


class HeadResources(_Strict):
    """Resources of the Ray head pod, which runs on the cluster's CPU pool."""

    cpus: CpuCount | None = Field(None, gt=0)
    """CPUs of the Ray head (default: the cluster's head_defaults)."""
    memory: Quantity | None = None
    """Memory of the Ray head, a Kubernetes quantity (default: the cluster's head_defaults)."""


class RackAffinity(_Strict):
    """Keep the job's pods close together using GKE topology labels (seed §4.1)."""

    level: Literal["block", "subblock", "host"] = "subblock"
    """Topology level the pods share: block (coarsest), subblock (a rack), host."""
    required: bool = False
    """Refuse to schedule outside one topology domain (default: preferred only)."""


class Preflight(_Strict):
    """The preflight that gates a rayjob: before its cmd runs, the driver checks every worker
    pod and the all-reduce between them, inside the cluster (runtime.preflight.gate)."""

    enabled: bool = True
    """Run it; false starts cmd at once (an image without GKR's runtime package)."""
    on_failure: Literal["retry", "teardown"] = "teardown"
    """teardown: the job fails and its RayCluster is deleted (`retries` may start it anew);
    retry: Warden replaces the pods of the nodes blamed, and the preflight runs again."""
    attempts: int = Field(3, ge=1, le=10)
    """With retry: runs of the preflight at most, the first included."""
    replacement_timeout: Duration = "30m"
    """With retry: how long to wait for the replaced pods to join."""


class Learner(_Strict):
    """One learner of a DiLoCo experiment: a RayJob of its own, on its cluster."""

    name: str = Field(pattern=r"^[a-z]([-a-z0-9]{0,14}[a-z0-9])?$")
    """Learner name (up to 16 characters); its RayJob is `<spec name>-<learner name>`."""
    cluster: str | None = None
    """Cluster of this learner (default: the spec's)."""
    accelerator: str | None = None
    """Accelerator type on that cluster (default: the spec's)."""
    pods: int | None = Field(None, ge=1, le=4096)
    """GPU pods of this learner (default: the spec's)."""
    gpus: int | None = Field(None, ge=0, le=64)
    """GPUs per pod (default: the spec's, else a whole node of the accelerator)."""
    cpus: CpuCount | None = Field(None, gt=0)
    """CPUs per pod (default: the spec's, else the node's share)."""
    memory: Quantity | None = None
    """Memory per pod (default: the spec's, else the node's share)."""


class Synchroniser(_Strict):
    """The experiment's synchroniser: a Job and a Service on the spec's cluster."""

    port: int = Field(5555, ge=1024, le=65535)
    """TCP port the learners dial."""
    expose: Literal["cluster", "load_balancer"] = "cluster"
    """cluster: a ClusterIP Service (learners on the spec's cluster only); load_balancer: a
    network load balancer at `address`, for learners on other clusters."""
    address: str | None = None
    """The load balancer's reserved external IPv4 address (expose: load_balancer)."""
    source_ranges: list[str] = Field(default_factory=list)
    """CIDR ranges allowed through the load balancer: the learner clusters' egress (NAT)
    addresses; the weights travel unencrypted, so nothing else may connect."""
    cpus: CpuCount = Field(4, gt=0)
    """CPUs of the synchroniser's pod (the merge runs on CPU)."""
    memory: Quantity = "16Gi"
    """Memory of the synchroniser's pod: a few copies of the model's weights."""
    checkpoint: str | None = None
    """Where the outer state is saved after every round (fsspec URI); none: not saved."""


class Diloco(_Strict):
    """A DiLoCo experiment (seed §6): learners on their own clusters that sync every
    `inner_steps` steps through one synchroniser."""

    learners: list[Learner] = Field(min_length=1, max_length=64)
    """The learners; each inherits the spec's fields and overrides where it runs."""
    inner_steps: int = Field(100, ge=1)
    """H: each learner's optimizer steps between two syncs."""
    mode: Mode = "barrier"
    """barrier: learners wait for each merge; decoupled: they train on and apply it later."""
    merge: Merge = "delta"
    """Decoupled mode: `delta` adds the outer update to weights that moved on; `replace`."""
    outer: OuterOptimizer = Field(default_factory=OuterOptimizer)
    """The outer optimizer: SGD, Nesterov momentum 0.9 and lr 0.7 by default (DiLoCo paper)."""
    round_timeout: Duration = "5m"
    """How long a round waits for a missing learner before merging without it."""
    learner_timeout: Duration = "15m"
    """How long a learner waits for a merge before training on and rejoining later."""
    synchroniser: Synchroniser = Field(default_factory=Synchroniser)
    """The synchroniser's pod and how learners reach it."""


class JobSpec(_Strict):
    """One job: a Ray job on a temporary cluster, a persistent Ray cluster, or a plain Job."""

    name: str
    """Job name, a DNS-1035 label; for files in jobs/ it must equal the file name."""
    kind: Kind
    """rayjob (temporary RayCluster, torn down at the end), raycluster (persistent), or job."""
    cluster: str
    """Target cluster: the name of a file in clusters/."""
    owner: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)
    """E-mail of the person responsible; notified by Warden before preemptible jobs drain."""
    namespace: str | None = None
    """Team namespace (default: the namespace of the team folder in the cluster catalog)."""
    pods: int = Field(1, ge=1, le=4096)
    """Number of GPU pods (Ray workers, or Job pods); one node each when multi-node."""
    gpus: int | None = Field(None, ge=0, le=64)
    """GPUs per pod (default: a whole node of the accelerator; 0 for CPU-only jobs)."""
    cpus: CpuCount | None = Field(None, gt=0)
    """CPUs per pod (default: the node's allocatable CPUs in proportion to the GPUs asked)."""
    memory: Quantity | None = None
    """Memory per pod, e.g. 512Gi (default: allocatable memory in proportion to the GPUs)."""
    accelerator: str | None = None
    """Accelerator type from platform/catalog/accelerators.yaml (none: a CPU-only job)."""
    image: str
    """Image: a name from platform/catalog/images.yaml or a reference pinned with @sha256."""
    cmd: Command | None = None
    """Shell command line, run by /bin/sh -c: the RayJob entrypoint or the Job's command."""
    working_dir: str | None = None
    """Working directory: an absolute path in the image, or a gs:// / https:// archive URI."""
    env_file: str | None = None
    """YAML file of environment variables, relative to the spec file."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables; they win over env_file and the accelerator's defaults."""
    preemptible: bool = False
    """The job tolerates losing workers: low priority, reclaimed first (seed §4.2)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra Kubernetes labels for every object and pod of the job."""
    head: HeadResources = Field(default_factory=HeadResources)
    """Ray head resources (rayjob and raycluster only)."""
    deadline: Duration | None = None
    """Maximum run time, e.g. 3d; the job is stopped after it (rayjob and job)."""
    ttl: Duration | None = None
    """How long a finished job's objects are kept before deletion (rayjob and job)."""
    rack_affinity: RackAffinity | None = None
    """Place all pods within one GKE topology domain."""
    relaunch_reservation: Duration | None = None
    """After a RayJob ends, keep its nodes reserved for the namespace this long (seed §4.3)."""
    retries: int = Field(0, ge=0, le=100)
    """How many times a failed job is retried (RayJob/Job backoffLimit)."""
    preflight: Preflight = Field(default_factory=Preflight)
    """The in-cluster preflight before a rayjob's cmd, and what a failure leads to."""
    diloco: Diloco | None = None
    """A DiLoCo experiment: one rayjob per learner and a synchroniser (rayjob only)."""
