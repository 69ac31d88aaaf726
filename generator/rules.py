"""Spec rules: the combinations a researcher can get wrong, checked against the catalog.

Each rule yields (field path, message) pairs; a message says what is allowed. Rules run
after the spec model accepted the types, and before anything is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from generator.catalog import PINNED_IMAGE, Accelerator, AcceleratorPool, Catalog, Cluster
from generator.kinds import KINDS
from generator.names import (
    DNS_1035,
    env_name_problem,
    env_value_problem,
    label_value_problem,
    qualified_name_problem,
)
from generator.spec import JobSpec
from generator.units import quantity_value
from runtime.identity import DOMAIN

Finding = tuple[tuple[str | int, ...], str]

URI = re.compile(r"(gs|https|s3|file)://\S+")  # file://: a shared filesystem (Ray)
RESERVED_LABEL_PREFIXES = (f"{DOMAIN}/", "kueue.x-k8s.io/", "ray.io/", "app.kubernetes.io/")


@dataclass(frozen=True)
class Context:
    spec: JobSpec
    team: str | None
    stem: str | None
    catalog: Catalog

    @property
    def cluster(self) -> Cluster | None:
        return self.catalog.clusters.get(self.spec.cluster)

    @property
    def pool(self) -> AcceleratorPool | None:
        cluster, name = self.cluster, self.spec.accelerator
        return cluster.accelerators.get(name) if cluster and name else None

    @property
    def accelerator(self) -> Accelerator | None:
        return self.catalog.accelerators.get(self.spec.accelerator or "")


def check_name(ctx: Context) -> Iterator[Finding]:
    spec, limit = ctx.spec, KINDS[ctx.spec.kind].name_limit
    if not DNS_1035.fullmatch(spec.name):
        yield ("name",), (f"{spec.name!r} is not a DNS-1035 label: lower-case letters, digits "
                          "and '-', starting with a letter")
    if len(spec.name) > limit:
        yield ("name",), f"{len(spec.name)} characters; a {spec.kind} name has at most {limit}"
    if ctx.stem is not None and spec.name != ctx.stem:
        yield ("name",), f"must equal the file name {ctx.stem!r}"


def check_cluster_and_team(ctx: Context) -> Iterator[Finding]:
    cluster, spec = ctx.cluster, ctx.spec
    if cluster is None:
        yield ("cluster",), f"unknown cluster; known: {', '.join(sorted(ctx.catalog.clusters))}"
        return
    if ctx.team is not None and ctx.team not in cluster.teams:
        yield ("cluster",), (f"team {ctx.team!r} has no namespace on {cluster.name}; teams "
                             f"there: {', '.join(sorted(cluster.teams))}")
    elif ctx.team is not None and spec.namespace not in (None, cluster.teams[ctx.team].namespace):
        yield ("namespace",), (f"jobs/{ctx.team}/ deploys into "
                               f"{cluster.teams[ctx.team].namespace!r} only")
    elif ctx.team is None and cluster.team_of_namespace(spec.namespace or "") is None:
        namespaces = sorted(team.namespace for team in cluster.teams.values())
        yield ("namespace",), f"must be a team namespace of {cluster.name}: {', '.join(namespaces)}"


def check_accelerator(ctx: Context) -> Iterator[Finding]:
    spec, cluster = ctx.spec, ctx.cluster
    if spec.accelerator is None:
        if spec.gpus:
            yield ("gpus",), "GPUs need an accelerator type (one per job)"
        return
    if cluster and ctx.pool is None:
        offered = ", ".join(sorted(cluster.accelerators)) or "none"
        yield ("accelerator",), f"{spec.accelerator!r} is not offered by {cluster.name}: {offered}"


def check_gpus(ctx: Context) -> Iterator[Finding]:
    spec, accel = ctx.spec, ctx.accelerator
    if accel is None:
        return
    gpus = accel.gpus_per_node if spec.gpus is None else spec.gpus
    yield from gpu_pod_findings(spec.pods, gpus, str(spec.accelerator), accel, ctx.pool)


def gpu_pod_findings(pods: int, gpus: int, name: str, accel: Accelerator,
                     pool: AcceleratorPool | None) -> Iterator[Finding]:
    """`pods` GPU pods of `gpus` each on `name` nodes (of `pool`): what does not fit. Also
    the limit of `gkr ray scale`, whose replicas are a RayCluster's pods."""
    per_node = accel.gpus_per_node
    if gpus == 0:
        yield ("gpus",), f"0 GPUs on an {name} node wastes it; drop `accelerator`"
    elif gpus > per_node:
        yield ("gpus",), f"{gpus} per pod, but an {name} node has {per_node}"
    elif pods > 1 and gpus != per_node:
        yield ("gpus",), (f"multi-node jobs take whole nodes: use {per_node} GPUs per pod "
                          f"(or pods: 1 for a partial node)")
    if pool is not None and pods > pool.nodes:
        yield ("pods",), f"{pods} pods, but {pool.node_pool} has {pool.nodes} nodes"


def check_pod_size(ctx: Context) -> Iterator[Finding]:
    spec, accel, cluster = ctx.spec, ctx.accelerator, ctx.cluster
    if accel is not None:
        limit, where = accel.pod_allocatable, f"an {spec.accelerator} node ({accel.machine_type})"
    elif cluster is not None and spec.accelerator is None:
        pool = cluster.head_pool
        limit, where = pool.allocatable, f"a CPU node ({pool.machine_type})"
    else:
        return
    if spec.cpus is not None and spec.cpus > limit.cpus:
        yield ("cpus",), f"{spec.cpus:g} per pod; {where} can give at most {limit.cpus:g}"
    if spec.memory and quantity_value(spec.memory) > quantity_value(limit.memory):
        yield ("memory",), f"{spec.memory} per pod; {where} can give at most {limit.memory}"


def check_head(ctx: Context) -> Iterator[Finding]:
    spec, cluster = ctx.spec, ctx.cluster
    if cluster is None:
        return
    limit = cluster.head_pool.allocatable
    if spec.head.cpus is not None and spec.head.cpus > limit.cpus:
        yield ("head", "cpus"), f"{spec.head.cpus:g}; a head node can give at most {limit.cpus:g}"
    if spec.head.memory and quantity_value(spec.head.memory) > quantity_value(limit.memory):
        yield ("head", "memory"), f"{spec.head.memory}; a head node gives at most {limit.memory}"


def check_image(ctx: Context) -> Iterator[Finding]:
    image = ctx.spec.image
    if re.fullmatch(PINNED_IMAGE, ctx.catalog.images.get(image, image)):
        return
    if image in ctx.catalog.images:
        yield ("image",), (f"catalog image {image!r} is an upstream image by tag; pin it "
                           f"first (`gkr images pin {image}`)")
        return
    names = ", ".join(sorted(ctx.catalog.images))
    yield ("image",), (f"{image!r} is not pinned: use a catalog name ({names}) or "
                       "repository@sha256:<digest>")


def check_kind_fields(ctx: Context) -> Iterator[Finding]:
    """Fields a kind has no use for are refused, not silently dropped."""
    spec, traits = ctx.spec, KINDS[ctx.spec.kind]
    if traits.needs_cmd and not spec.cmd:
        yield ("cmd",), f"a {spec.kind} needs a command"
    for name, instead in traits.refuses:
        if name in spec.model_fields_set:
            yield (name,), instead
    if spec.working_dir and URI.fullmatch(spec.working_dir) and not traits.fetches_working_dir:
        yield ("working_dir",), (f"a {spec.kind} cannot fetch a remote working_dir; "
                                 "use a path in the image")


def check_rack_affinity(ctx: Context) -> Iterator[Finding]:
    """Rack affinity is a pod affinity among the GPU pods; where there are none to keep
    together it cannot act, and is refused rather than dropped."""
    spec = ctx.spec
    if spec.rack_affinity is None:
        return
    if spec.accelerator is None:
        yield ("rack_affinity",), "keeps GPU pods together; a CPU-only job has none"
    elif spec.pods < 2:
        yield ("rack_affinity",), "needs more than one pod to keep together"


def check_environment(ctx: Context) -> Iterator[Finding]:
    spec = ctx.spec
    for name, value in spec.env.items():
        problem = env_name_problem(name) or env_value_problem(value)
        if problem:
            yield ("env", name), problem
    working_dir = spec.working_dir
    if working_dir and not (working_dir.startswith("/") or URI.fullmatch(working_dir)):
        yield ("working_dir",), ("an absolute path in the image, or a gs://, s3://, https:// or "
                                 "file:// URI")


def check_labels(ctx: Context) -> Iterator[Finding]:
    for key, value in ctx.spec.labels.items():
        problem = qualified_name_problem(key)
        if problem is None and key.startswith(RESERVED_LABEL_PREFIXES):
            problem = f"prefixes {', '.join(RESERVED_LABEL_PREFIXES)} are reserved"
        if problem:
            yield ("labels", key), problem
        if (problem := label_value_problem(value)) is not None:
            yield ("labels", key), problem


RULES: tuple[Callable[[Context], Iterator[Finding]], ...] = (
    check_name, check_cluster_and_team, check_accelerator, check_gpus, check_pod_size,
    check_head, check_image, check_kind_fields, check_rack_affinity, check_environment,
    check_labels,
)


def findings(ctx: Context) -> list[Finding]:
    return [finding for rule in RULES for finding in rule(ctx)]
