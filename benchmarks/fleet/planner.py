"""The capacity planner on the simulated fleet: one RayCluster over every node of the fleet.

The services are those of a large distillation run (seed §5): a teacher on whole GPUs, a
reward model and an image encoder sharing GPUs, CPU-only data-loader producers, and a
singleton evaluator. Figures: plan time (median of a few plans), the world size it found, and
the explanation's size, which must not grow with the fleet (it is printed to the user).

    .venv/bin/python -m benchmarks.fleet.planner --nodes 1250
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.fleet import Figure, Fleet
from runtime.planner import (
    CapacityPlan,
    NodeCapacity,
    PlanInput,
    ServiceDemand,
    WorkerRequest,
    plan_capacity,
)

# An H200 node as Ray sees it: 8 GPUs and the CPUs its pod may ask for (catalog allocatable
# minus the sidecars', rounded down).
NODE_CPUS = 200.0
SERVICES = (
    ServiceDemand("teacher", WorkerRequest(1.0, 8.0), ratio=32),
    ServiceDemand("reward", WorkerRequest(0.5, 4.0), ratio=64),
    ServiceDemand("encoder", WorkerRequest(0.25, 4.0), ratio=16),
    ServiceDemand("producer", WorkerRequest(0.0, 8.0), ratio=2),
    ServiceDemand("evaluator", WorkerRequest(1.0, 8.0), ratio=1, singleton=True),
)
# Tensor x pipeline x context parallel: 8 x 4 x 1, so the world size is a multiple of 32.
LAYOUT_MULTIPLE = 32


def plan_input(fleet: Fleet) -> PlanInput:
    nodes = (NodeCapacity(float(fleet.gpus_per_node), NODE_CPUS),) * fleet.nodes
    return PlanInput(nodes, WorkerRequest(1.0, 12.0), SERVICES, LAYOUT_MULTIPLE)


def timed_plan(spec: PlanInput) -> tuple[CapacityPlan, float]:
    start = time.perf_counter()
    plan = plan_capacity(spec)
    return plan, time.perf_counter() - start


def measure(fleet: Fleet, repeat: int = 3) -> list[Figure]:
    spec = plan_input(fleet)
    runs = [timed_plan(spec) for _ in range(repeat)]
    plan = runs[0][0]
    placed = sum(len(node) for node in plan.placement)
    return [
        Figure("planner", "plan time", statistics.median(t for _, t in runs) * 1e3, "ms",
               goal=1000.0),
        Figure("planner", "training world size", plan.world_size, "ranks"),
        Figure("planner", "auxiliary replicas", sum(plan.replicas.values()), "workers"),
        Figure("planner", "bundles placed", placed, "bundles"),
        Figure("planner", "explanation", len(plan.explain().encode()), "bytes", goal=2048.0),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1250)
    options = parser.parse_args()
    for figure in measure(Fleet(options.nodes)):
        print(f"{figure.name:<24} {figure.value:12.1f} {figure.unit:<8} {figure.verdict()}")


if __name__ == "__main__":
    main()
