"""Where the gate's pod tasks run: one Ray actor per worker pod, pinned to that pod's node.

A Ray actor per pod rather than an init container in each worker pod: the gate needs every
pod at once (the all-reduce between them) and one place that sees all their results and
decides (report, retry, tear down); the RayJob's driver is that place and already runs
inside the cluster, after KubeRay has started every pod. The worker nodes are the alive Ray
nodes with CPUs: GKR starts every Ray head with `num-cpus: "0"`
(generator/templates/ray_cluster_spec.yaml.j2), so no work is ever placed on it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from runtime.identity import Env
from runtime.preflight.tasks import PodOutcome, PodSlot, PodsMissing, PodTask

POLL_S = 1.0  # how often the cluster's nodes are listed while pods are awaited


class _Agent:
    """The gate's actor in one worker pod (it holds the pod's GPUs while the gate runs)."""

    def where(self) -> dict[str, str]:
        host = socket.gethostname()
        return {"node": os.environ.get(Env.NODE) or host, "pod": os.environ.get(Env.POD) or host,
                "address": ray.util.get_node_ip_address()}

    def free_port(self) -> int:
        with socket.socket() as probe:
            probe.bind(("", 0))
            return int(probe.getsockname()[1])

    def run(self, task: str) -> str:
        from runtime.preflight.pod import run_pod  # torch: in the pods, never on the head

        return run_pod(PodTask.model_validate_json(task)).model_dump_json()


class RayPods:
    """The worker pods of the RayJob this driver runs in, one pinned `_Agent` each."""

    def __init__(self, gpus_per_pod: int) -> None:
        self.gpus = gpus_per_pod
        self.agents: dict[str, Any] = {}  # Ray node id -> its agent

    def wait(self, count: int, timeout_s: float, avoid: set[str]) -> list[PodSlot]:
        deadline = time.monotonic() + timeout_s
        while True:
            slots = self._slots(avoid, max(deadline - time.monotonic(), 1.0))
            if len(slots) >= count:
                return slots[:count]
            if time.monotonic() >= deadline:
                raise PodsMissing(f"{len(slots)} of {count} worker pods joined in "
                                  f"{timeout_s:g} s")
            time.sleep(POLL_S)

    def _slots(self, avoid: set[str], timeout_s: float) -> list[PodSlot]:
        alive = {n["NodeID"] for n in ray.nodes()
                 if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0}
        for gone in set(self.agents) - alive:
            self._kill(self.agents.pop(gone))
        for node in sorted(alive - set(self.agents)):
            self.agents[node] = ray.remote(num_cpus=0, num_gpus=self.gpus)(_Agent).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        refs = {key: agent.where.remote() for key, agent in self.agents.items()}
        if not refs:
            return []
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
        slots = [PodSlot(key=key, **ray.get(ref)) for key, ref in refs.items() if ref in ready]
        return sorted((s for s in slots if s.pod not in avoid), key=lambda s: s.pod)

    def free_port(self, slot: PodSlot) -> int:
        return int(ray.get(self.agents[slot.key].free_port.remote()))

    def run(self, tasks: list[PodTask], slots: list[PodSlot],
            timeout_s: float) -> list[PodOutcome | None]:
        refs = [self.agents[s.key].run.remote(t.model_dump_json()) for t, s in zip(tasks, slots,
                                                                                    strict=True)]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        return [_outcome(ref) if ref in ready else None for ref in refs]

    def close(self) -> None:
        """Release the pods' GPUs for the job's own command."""
        for agent in self.agents.values():
            self._kill(agent)
        self.agents.clear()

    @staticmethod
    def _kill(agent: Any) -> None:
        with suppress(Exception):  # already gone with its node
            ray.kill(agent)


def _outcome(ref: Any) -> PodOutcome | None:
    try:
        return PodOutcome.model_validate_json(ray.get(ref))
    except ray.exceptions.RayError:  # the agent or its node died
        return None


@contextmanager
def ray_pods(gpus_per_pod: int) -> Iterator[RayPods]:
    """The job's pods through the Ray cluster this driver belongs to (RAY_ADDRESS, set by
    Ray's job supervisor), disconnected afterwards so the job's cmd starts on a free cluster."""
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    pods = RayPods(gpus_per_pod)
    try:
        yield pods
    finally:
        pods.close()
        ray.shutdown()
