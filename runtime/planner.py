"""Capacity planning: split a RayCluster's GPUs and CPUs between training and auxiliary workers.

Seed §5.3: auxiliary capacity is reserved first from a proportional estimate built from each
worker's request and the training-workers-per-auxiliary-worker ratio; the training world size
is then rounded to the parallelism layout. Several auxiliary workers may share one GPU; on
single-node debug runs different service types may share one, while multi-node jobs give
each GPU service type whole GPUs of its own. The planner is pure: resources in, plan out.
Amounts are handled in thousandths so that fractional GPUs add up exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from runtime.errors import RuntimeFailure

__all__ = [
    "Bundle",
    "CapacityPlan",
    "NodeCapacity",
    "PlanError",
    "PlanInput",
    "ServiceDemand",
    "WorkerRequest",
    "plan_capacity",
]

MILLI = 1000
TRAIN = "train"


class PlanError(RuntimeFailure):
    """The cluster cannot hold the requested training layout and auxiliary minimums."""


@dataclass(frozen=True)
class NodeCapacity:
    """What one Ray node offers."""

    gpus: float
    cpus: float


@dataclass(frozen=True)
class WorkerRequest:
    """What one worker asks for: whole or fractional GPUs, and CPUs."""

    gpus: float
    cpus: float


@dataclass(frozen=True)
class ServiceDemand:
    """One auxiliary service type as the planner sees it."""

    name: str
    request: WorkerRequest
    ratio: float  # training workers served by one auxiliary worker
    min_replicas: int = 1
    singleton: bool = False


@dataclass(frozen=True)
class PlanInput:
    """Everything the planner needs: the cluster, the training worker and the services."""

    nodes: tuple[NodeCapacity, ...]
    training: WorkerRequest
    services: tuple[ServiceDemand, ...] = ()
    layout_multiple: int = 1  # the world size must be a multiple of tp * pp * cp
    max_world_size: int | None = None


@dataclass(frozen=True)
class Bundle:
    """A placement-group bundle: resources (thousandths) for `workers` workers of `owner`."""

    owner: str
    gpus_milli: int
    cpus_milli: int
    workers: int = 1


@dataclass(frozen=True)
class CapacityPlan:
    """The result: the training world size, replicas per service and a placement witness."""

    world_size: int
    replicas: dict[str, int]
    bundles: dict[str, tuple[Bundle, ...]]
    placement: tuple[tuple[Bundle, ...], ...]  # per node, a packing that proves the plan fits
    explanation: tuple[str, ...] = field(default=())

    def explain(self) -> str:
        """The plan as printable lines."""
        return "\n".join(self.explanation)


def _milli(value: float) -> int:
    return round(value * MILLI)


def plan_capacity(spec: PlanInput) -> CapacityPlan:
    """Plan the largest training world size that fits beside every service's replicas."""
    _check_input(spec)
    estimate = proportional_estimate(spec)
    step = spec.layout_multiple
    upper = _training_ceiling(spec)
    size = min(upper, int(estimate) // step * step)
    while size + step <= upper and _pack(spec, size + step) is not None:
        size += step
    while size >= step and _pack(spec, size) is None:
        size -= step
    if size < step:
        raise PlanError(_why_infeasible(spec))
    placement = _pack(spec, size)
    assert placement is not None  # the loop above stopped on a size that packs
    bundles = _all_bundles(spec, size)
    replicas = {s.name: _replicas(s, size) for s in spec.services}
    lines = _explain(spec, estimate, size, replicas, placement)
    return CapacityPlan(size, replicas, bundles, placement, tuple(lines))


def proportional_estimate(spec: PlanInput) -> float:
    """Seed §5.3 estimate: T = free / (t + Σ s / ratio), taken over GPUs and CPUs."""
    estimates = []
    for resource in ("gpus", "cpus"):
        free = sum(getattr(n, resource) for n in spec.nodes)
        free -= sum(getattr(s.request, resource) for s in spec.services if s.singleton)
        per_trainer = getattr(spec.training, resource) + sum(
            getattr(s.request, resource) / s.ratio for s in spec.services if not s.singleton
        )
        if per_trainer > 0:
            estimates.append(max(free, 0.0) / per_trainer)
    return min(estimates) if estimates else float(spec.max_world_size or 0)


def _check_input(spec: PlanInput) -> None:
    if not spec.nodes:
        raise PlanError("the cluster has no nodes")
    if spec.layout_multiple < 1:
        raise PlanError(f"layout multiple must be >= 1, got {spec.layout_multiple}")
    if spec.training.gpus not in (0, 1):
        raise PlanError("a training worker occupies exactly one whole GPU (or none on CPU)")
    if spec.training.gpus == 0 and spec.training.cpus <= 0 and spec.max_world_size is None:
        raise PlanError("a training worker that needs neither GPU nor CPU needs max_world_size")
    for service in spec.services:
        _check_service(service)


def _check_service(service: ServiceDemand) -> None:
    gpus = service.request.gpus
    if service.ratio <= 0:
        raise PlanError(f"{service.name}: ratio must be > 0, got {service.ratio}")
    if gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise PlanError(f"{service.name}: gpus per worker must be a fraction <= 1 or whole")
    if service.min_replicas < 1:
        raise PlanError(f"{service.name}: min_replicas must be >= 1")


def _training_ceiling(spec: PlanInput) -> int:
    total_gpus = sum(n.gpus for n in spec.nodes)
    total_cpus = sum(n.cpus for n in spec.nodes)
    limits = [spec.max_world_size] if spec.max_world_size is not None else []
    if spec.training.gpus > 0:
        limits.append(int(total_gpus // spec.training.gpus))
    if spec.training.cpus > 0:
        limits.append(int(total_cpus // spec.training.cpus))
    step = spec.layout_multiple
    return min(limits) // step * step


def _replicas(service: ServiceDemand, world_size: int) -> int:
    if service.singleton:
        return 1
    return max(service.min_replicas, math.ceil(world_size / service.ratio))


def _multi_node(spec: PlanInput) -> bool:
    return len(spec.nodes) > 1


def _service_bundles(spec: PlanInput, service: ServiceDemand, count: int) -> list[Bundle]:
    """Per-worker bundles; on multi-node jobs fractional-GPU workers share whole GPUs."""
    gpus, cpus = _milli(service.request.gpus), _milli(service.request.cpus)
    if not (_multi_node(spec) and 0 < gpus < MILLI):
        return [Bundle(service.name, gpus, cpus) for _ in range(count)]
    per_gpu = MILLI // gpus
    groups = [min(per_gpu, count - start) for start in range(0, count, per_gpu)]
    return [Bundle(service.name, MILLI, cpus * n, workers=n) for n in groups]


def _all_bundles(spec: PlanInput, world_size: int) -> dict[str, tuple[Bundle, ...]]:
    train = Bundle(TRAIN, _milli(spec.training.gpus), _milli(spec.training.cpus))
    bundles = {TRAIN: (train,) * world_size}
    for service in spec.services:
        count = _replicas(service, world_size)
        bundles[service.name] = tuple(_service_bundles(spec, service, count))
    return bundles


def _pack(spec: PlanInput, world_size: int) -> tuple[tuple[Bundle, ...], ...] | None:
    """First-fit decreasing onto nodes; None when the bundles do not fit."""
    free = [[_milli(n.gpus), _milli(n.cpus)] for n in spec.nodes]
    placed: list[list[Bundle]] = [[] for _ in spec.nodes]
    every = [b for group in _all_bundles(spec, world_size).values() for b in group]
    # Free space only shrinks, so a node that could not take a bundle of some shape never
    # will: each shape's search resumes where its last one ended (linear, not nodes x bundles).
    start: dict[tuple[int, int], int] = {}
    for bundle in sorted(every, key=lambda b: (b.gpus_milli, b.cpus_milli), reverse=True):
        shape = (bundle.gpus_milli, bundle.cpus_milli)
        slot = _first_fit(free, bundle, start.get(shape, 0))
        if slot is None:
            return None
        start[shape] = slot
        free[slot][0] -= bundle.gpus_milli
        free[slot][1] -= bundle.cpus_milli
        placed[slot].append(bundle)
    return tuple(tuple(node) for node in placed)


def _first_fit(free: list[list[int]], bundle: Bundle, start: int) -> int | None:
    for index in range(start, len(free)):
        gpus, cpus = free[index]
        if bundle.gpus_milli <= gpus and bundle.cpus_milli <= cpus:
            return index
    return None


def _why_infeasible(spec: PlanInput) -> str:
    """Name the first service whose minimum does not fit beside the smallest training layout."""
    step = spec.layout_multiple
    trimmed = PlanInput(spec.nodes, spec.training, (), step, spec.max_world_size)
    if _training_ceiling(spec) < step or _pack(trimmed, step) is None:
        return (
            f"the cluster cannot hold the smallest training layout ({step} worker(s) of "
            f"{spec.training.gpus} GPU, {spec.training.cpus} CPU)"
        )
    for count in range(1, len(spec.services) + 1):
        subset = PlanInput(spec.nodes, spec.training, spec.services[:count], step, None)
        if _pack(subset, step) is None:
            service = spec.services[count - 1]
            return (
                f"service {service.name!r} cannot get its minimum of "
                f"{_replicas(service, step)} replica(s) of {service.request.gpus} GPU, "
                f"{service.request.cpus} CPU beside {step} training worker(s)"
            )
    return "the requested layout does not fit the cluster"


def _totals(bundles: Iterable[Bundle]) -> tuple[float, float]:
    items = list(bundles)
    gpus = sum(b.gpus_milli for b in items) / MILLI
    return gpus, sum(b.cpus_milli for b in items) / MILLI


def _explain(
    spec: PlanInput,
    estimate: float,
    size: int,
    replicas: dict[str, int],
    placement: tuple[tuple[Bundle, ...], ...],
) -> list[str]:
    gpus, cpus = sum(n.gpus for n in spec.nodes), sum(n.cpus for n in spec.nodes)
    lines = [
        f"cluster: {len(spec.nodes)} node(s), {gpus:g} GPU, {cpus:g} CPU",
        f"proportional estimate of training workers: {estimate:.2f}",
    ]
    for service in spec.services:
        kind = "singleton" if service.singleton else f"1 per {service.ratio:g} training workers"
        lines.append(
            f"service {service.name}: {replicas[service.name]} replica(s) x "
            f"({service.request.gpus:g} GPU, {service.request.cpus:g} CPU); {kind}, "
            f"min {service.min_replicas}"
        )
    lines.append(
        f"training: world size {size} (multiple of {spec.layout_multiple}) x "
        f"({spec.training.gpus:g} GPU, {spec.training.cpus:g} CPU)"
    )
    used_gpus, used_cpus = _totals(b for node in placement for b in node)
    lines.append(f"idle: {gpus - used_gpus:g} GPU, {cpus - used_cpus:g} CPU")
    return lines
