"""The simulated fleet of issue 15: one module per piece of the control plane.

Each piece module (`planner`, `render`, `warden`, `stragglers`, `monitor`) exposes
`measure(fleet: Fleet, **options) -> list[Figure]`; `benchmarks/fleet_sim.py` runs them at
several fleet sizes and prints each figure beside the size it was measured at, and
`tests/fleet/` runs them at a reduced size. Figures carry their goal (an upper bound), so the
printout says which goals are met without any timing assert in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLUSTERS", "Figure", "Fleet"]

CLUSTERS = ("euw4-prod", "usc1-prod", "usw1-sim")  # the last is simulated only


@dataclass(frozen=True)
class Fleet:
    """A simulated fleet: `nodes` nodes of `gpus_per_node` GPUs, spread over `clusters`."""

    nodes: int
    gpus_per_node: int = 8
    clusters: tuple[str, ...] = CLUSTERS

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_names(self) -> list[str]:
        """Node names, round-robin over the clusters: `<cluster>-gpu-<index>`."""
        return [f"{self.clusters[i % len(self.clusters)]}-gpu-{i:05d}" for i in range(self.nodes)]


@dataclass(frozen=True)
class Figure:
    """One measured figure; `goal` is the upper bound it should stay under, if it has one."""

    piece: str
    name: str
    value: float
    unit: str
    goal: float | None = None

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else self.value <= self.goal

    def verdict(self) -> str:
        if self.goal is None:
            return ""
        return f"goal <= {self.goal:g} " + ("met" if self.met else "MISSED")
