"""The driver's side of torchft (seed §7.2): the Lighthouse, the run's Board, and the
auxiliary services that every replica group shares.

The driver hosts the torchft Lighthouse, which forms the quorum of replica groups from the
heartbeats of their Manager servers. It also starts the auxiliary services (with fault
tolerance off, rank 0 does), so that they outlive any one group, and restores their state
when the run resumes from a checkpoint. Each replica group then runs as its own Ray Train
worker group (runtime.ft.group says why); `finish` turns their outcomes into the run's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import ray

from runtime.aux.coordinator import AuxCoordinator
from runtime.errors import RuntimeFailure
from runtime.ft.listen import socket_address
from runtime.ft.replica import ReplicaSpec, quiet_torchft
from runtime.ft.shrink import start_board
from runtime.identity import listen_host
from runtime.planner import CapacityPlan
from runtime.run.checkpointing import (
    ResumePoint,
    SaveOnly,
    aux_hooks,
    restore_services,
)
from runtime.run.config import TrainConfig
from runtime.warden.model import ShrinkRequest

Context = TypeVar("Context")


class RunStopped(RuntimeFailure):
    """Fewer replica groups than fault_tolerance.min_replica_groups were left."""


class ReplicaHost:
    """Lighthouse, Board and shared services for the life of one fault-tolerant run."""

    def __init__(self, config: TrainConfig, run_id: str, plan: CapacityPlan,
                 resume: ResumePoint | None) -> None:
        self.config, self.ft, self.run_id = config, config.fault_tolerance, run_id
        self.plan, self.resume = plan, resume
        self.group_size = plan.world_size // self.ft.replica_groups
        self.lighthouse: Any = None
        self.board: Any = None
        self.coordinator: AuxCoordinator | None = None
        self.services: dict[str, Any] = {}
        self.hooks: list[Any] = []

    def __enter__(self) -> ReplicaHost:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        quiet_torchft()
        from torchft.coordination import LighthouseServer  # torchft only when it is on

        ft = self.ft
        # The pod's IP, not every interface (runtime.ft.listen): only the job's own pods
        # may reach it (the job's NetworkPolicy), and its kill endpoint asks for nothing.
        self.lighthouse = LighthouseServer(
            bind=socket_address(listen_host(), 0), min_replicas=ft.min_replica_groups,
            join_timeout_ms=int(ft.join_timeout_s * 1000),
            heartbeat_timeout_ms=int(ft.heartbeat_timeout_s * 1000),
        )
        self.board = start_board(self.run_id)
        if self.config.aux.services:
            self.coordinator = AuxCoordinator(self.run_id, self.config.aux, self.plan)
            self.services = self.coordinator.start()
            self.hooks = aux_hooks(self.coordinator)
            restore_services(self.hooks, self.resume)

    @property
    def address(self) -> str:
        """The Lighthouse as workers on other nodes reach it: the address it is bound to (its
        own name for itself is the hostname)."""
        port = urlsplit(self.lighthouse.address()).port
        return f"http://{socket_address(listen_host(), port or 0)}"

    def explain(self) -> str:
        """One line for the driver's output."""
        return (f"fault tolerance: {self.ft.replica_groups} replica groups of "
                f"{self.group_size} rank(s), Lighthouse at {self.address}; training goes on "
                f"while at least {self.ft.min_replica_groups} group(s) are in the quorum")

    def contexts(self, base: Context) -> list[Context]:
        """The loop context of each replica group: its place, and the shared services."""
        hooks = tuple(SaveOnly(hook) for hook in self.hooks)
        return [
            dataclasses.replace(base, services=self.services, hooks=hooks,  # type: ignore[type-var]
                                replica=ReplicaSpec(index, self.address))
            for index in range(self.ft.replica_groups)
        ]

    def finish(self, failures: Mapping[int, str]) -> list[str]:
        """The run's outcome from its groups' (`failures`: the groups whose Ray Train runs
        gave up, with why): lines to show, or RunStopped when too few groups were left."""
        stopped = ray.get(self.board.stopped.remote())
        lost = [f"replica group {g} gave up after run.max_failures="
                f"{self.config.run.max_failures} restart(s): {why}"
                for g, why in sorted(failures.items())]
        if stopped is not None:
            raise RunStopped("; ".join([f"training run {self.run_id} stopped: {stopped}",
                                        *lost]))
        if len(failures) == self.ft.replica_groups:
            raise RuntimeFailure(f"training run {self.run_id} failed: every replica group "
                                 "failed; " + "; ".join(lost))
        return lost

    def shrinks(self) -> list[ShrinkRequest]:
        """The shrink requests the run recorded (a run without Warden)."""
        requests: list[ShrinkRequest] = ray.get(self.board.shrinks.remote())
        return requests

    def close(self) -> None:
        """Stop the services, the Board and the Lighthouse."""
        if self.coordinator is not None:
            self.coordinator.shutdown()
        if self.board is not None:
            ray.kill(self.board)
        if self.lighthouse is not None:
            self.lighthouse.shutdown()

    def __exit__(self, *exc: object) -> None:
        self.close()
