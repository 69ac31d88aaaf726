"""Capacity planner: worked examples from seed §5.3 and property tests over random clusters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.planner import (
    MILLI,
    NodeCapacity,
    PlanError,
    PlanInput,
    ServiceDemand,
    WorkerRequest,
    plan_capacity,
    proportional_estimate,
)

GPU_TRAINER = WorkerRequest(gpus=1, cpus=4)


def _nodes(count: int, gpus: float = 8, cpus: float = 96) -> tuple[NodeCapacity, ...]:
    return tuple(NodeCapacity(gpus, cpus) for _ in range(count))


def test_estimate_follows_the_proportional_formula() -> None:
    encoder = ServiceDemand("encoder", WorkerRequest(0.5, 2), ratio=4)
    spec = PlanInput(_nodes(2), GPU_TRAINER, (encoder,))
    # 16 GPUs / (1 + 0.5 / 4) = 14.22
    assert proportional_estimate(spec) == pytest.approx(16 / 1.125)


def test_multi_node_plan_reserves_whole_gpus_per_service() -> None:
    encoder = ServiceDemand("encoder", WorkerRequest(0.5, 2), ratio=4)
    evaluator = ServiceDemand("evaluator", WorkerRequest(0.25, 1), ratio=64)
    plan = plan_capacity(PlanInput(_nodes(2), GPU_TRAINER, (encoder, evaluator)))
    # 13 trainers + 2 GPUs of encoders (4 x 0.5) + 1 GPU for the evaluator alone = 16
    assert plan.world_size == 13
    assert plan.replicas == {"encoder": 4, "evaluator": 1}
    assert [b.gpus_milli for b in plan.bundles["encoder"]] == [MILLI, MILLI]
    assert [b.gpus_milli for b in plan.bundles["evaluator"]] == [MILLI]
    assert "world size 13" in plan.explain()


def test_single_node_lets_service_types_share_a_gpu() -> None:
    encoder = ServiceDemand("encoder", WorkerRequest(0.5, 1), ratio=8)
    evaluator = ServiceDemand("evaluator", WorkerRequest(0.5, 1), ratio=64)
    plan = plan_capacity(PlanInput(_nodes(1), GPU_TRAINER, (encoder, evaluator)))
    assert plan.world_size == 7  # encoder and evaluator share the eighth GPU


def test_world_size_is_rounded_to_the_layout() -> None:
    encoder = ServiceDemand("encoder", WorkerRequest(1, 4), ratio=8)
    plan = plan_capacity(PlanInput(_nodes(2), GPU_TRAINER, (encoder,), layout_multiple=4))
    assert plan.world_size == 12
    assert plan.replicas == {"encoder": 2}


def test_singleton_gets_exactly_one_replica() -> None:
    judge = ServiceDemand("judge", WorkerRequest(1, 4), ratio=1, singleton=True)
    plan = plan_capacity(PlanInput(_nodes(1), GPU_TRAINER, (judge,)))
    assert plan.replicas == {"judge": 1}
    assert plan.world_size == 7


def test_cpu_only_cluster_plans_on_cpus() -> None:
    echo = ServiceDemand("echo", WorkerRequest(0, 1), ratio=2)
    spec = PlanInput(_nodes(1, gpus=0, cpus=4), WorkerRequest(0, 1), (echo,), max_world_size=2)
    plan = plan_capacity(spec)
    assert (plan.world_size, plan.replicas) == (2, {"echo": 1})


def test_unreachable_minimum_names_the_service() -> None:
    big = ServiceDemand("reward", WorkerRequest(1, 4), ratio=1, min_replicas=9)
    with pytest.raises(PlanError, match="'reward'"):
        plan_capacity(PlanInput(_nodes(1), GPU_TRAINER, (big,)))


def test_bad_ratio_is_refused() -> None:
    bad = ServiceDemand("encoder", WorkerRequest(0.5, 1), ratio=0)
    with pytest.raises(PlanError, match="encoder: ratio"):
        plan_capacity(PlanInput(_nodes(1), GPU_TRAINER, (bad,)))


services = st.lists(
    st.builds(
        ServiceDemand,
        name=st.sampled_from(["a", "b", "c", "d"]),
        request=st.builds(
            WorkerRequest,
            gpus=st.sampled_from([0, 0.125, 0.25, 0.5, 1, 2]),
            cpus=st.sampled_from([0.5, 1, 2, 8]),
        ),
        ratio=st.sampled_from([1, 2, 3.5, 8, 64]),
        min_replicas=st.integers(1, 3),
        singleton=st.booleans(),
    ),
    max_size=3,
    unique_by=lambda s: s.name,
)
plan_inputs = st.builds(
    PlanInput,
    nodes=st.lists(
        st.builds(NodeCapacity, gpus=st.integers(0, 8), cpus=st.integers(1, 64)),
        min_size=1,
        max_size=4,
    ).map(tuple),
    training=st.sampled_from([WorkerRequest(1, 2), WorkerRequest(0, 1), WorkerRequest(1, 8)]),
    services=services.map(tuple),
    layout_multiple=st.sampled_from([1, 2, 4]),
    max_world_size=st.one_of(st.none(), st.integers(1, 40)),
)


@settings(max_examples=300, deadline=None)
@given(plan_inputs)
def test_plan_never_over_allocates_and_meets_minimums(spec: PlanInput) -> None:
    try:
        plan = plan_capacity(spec)
    except PlanError as error:
        assert str(error)
        return
    for node, placed in zip(spec.nodes, plan.placement, strict=True):
        assert sum(b.gpus_milli for b in placed) <= node.gpus * MILLI
        assert sum(b.cpus_milli for b in placed) <= node.cpus * MILLI
    assert plan.world_size % spec.layout_multiple == 0
    assert plan.world_size >= spec.layout_multiple
    placed_workers = {}
    for bundle in (b for node in plan.placement for b in node):
        placed_workers[bundle.owner] = placed_workers.get(bundle.owner, 0) + bundle.workers
    assert placed_workers["train"] == plan.world_size
    for service in spec.services:
        count = plan.replicas[service.name]
        assert placed_workers[service.name] == count
        if service.singleton:
            assert count == 1
        else:
            assert count >= max(service.min_replicas, math.ceil(plan.world_size / service.ratio))


@settings(max_examples=200, deadline=None)
@given(plan_inputs)
def test_multi_node_gpu_services_never_share_a_gpu(spec: PlanInput) -> None:
    try:
        plan = plan_capacity(spec)
    except PlanError:
        return
    if len(spec.nodes) == 1:
        return
    for name, bundles in plan.bundles.items():
        for bundle in bundles:
            assert bundle.gpus_milli % MILLI == 0, (name, bundle)


def _first_fit_reference(nodes: tuple[NodeCapacity, ...], bundles: list) -> list[list]:
    """First-fit decreasing as written in a textbook: every bundle scans from the first node."""
    free = [[round(n.gpus * MILLI), round(n.cpus * MILLI)] for n in nodes]
    placed: list[list] = [[] for _ in nodes]
    for bundle in sorted(bundles, key=lambda b: (b.gpus_milli, b.cpus_milli), reverse=True):
        slot = next(i for i, (g, c) in enumerate(free)
                    if bundle.gpus_milli <= g and bundle.cpus_milli <= c)
        free[slot][0] -= bundle.gpus_milli
        free[slot][1] -= bundle.cpus_milli
        placed[slot].append(bundle)
    return placed


@settings(max_examples=200, deadline=None)
@given(plan_inputs)
def test_packing_shortcut_places_like_plain_first_fit(spec: PlanInput) -> None:
    """The planner resumes each bundle shape's search where the last one stopped (linear at
    fleet scale); the placement must be exactly what plain first-fit gives."""
    try:
        plan = plan_capacity(spec)
    except PlanError:
        return
    every = [b for group in plan.bundles.values() for b in group]
    assert [list(node) for node in plan.placement] == _first_fit_reference(spec.nodes, every)
