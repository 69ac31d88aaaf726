"""The auxiliary-worker coordinator (seed §5.4): turns the capacity plan into Ray placement
groups, starts every service's workers and one proxy per node that hosts them, and hands
back what training ranks need to reach each service.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from runtime.aux.actors import AuxProxyActor, AuxWorkerActor
from runtime.aux.client import Endpoint, ServiceHandle
from runtime.aux.config import AuxConfig, ServiceConfig
from runtime.aux.errors import AuxStartupError
from runtime.aux.refresh import RefreshHub, RefreshPoint
from runtime.planner import MILLI, Bundle, CapacityPlan

_Worker = ray.remote(AuxWorkerActor)
_Proxy = ray.remote(num_cpus=0)(AuxProxyActor)


def _resources(bundle: Bundle) -> dict[str, float]:
    wanted = {"CPU": bundle.cpus_milli / MILLI, "GPU": bundle.gpus_milli / MILLI}
    return {name: amount for name, amount in wanted.items() if amount > 0}


def _cause(error: Exception) -> str:
    """The last line of a Ray error, which names the remote exception, without the traceback."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


class AuxCoordinator:
    """Starts and stops the auxiliary services of one run."""

    def __init__(self, run_id: str, config: AuxConfig, plan: CapacityPlan) -> None:
        self.run_id, self.config, self.plan = run_id, config, plan
        self.actors: dict[str, list[Any]] = {}
        self.proxies: dict[str, list[Any]] = {}
        self.groups: list[Any] = []
        self.hub: RefreshHub | None = None  # the refresh store, while a service refreshes

    def start(self) -> dict[str, ServiceHandle]:
        """Start every service; raises AuxStartupError naming the service that failed."""
        return {name: self._start_service(name, svc) for name, svc in self.config.services.items()}

    def _start_service(self, name: str, service: ServiceConfig) -> ServiceHandle:
        bundles = self.plan.bundles[name]
        group = placement_group(
            [_resources(b) for b in bundles], strategy=self.config.placement.value,
            name=f"gkr-{self.run_id}-{name}",
        )
        self.groups.append(group)
        self._wait(name, group.ready(), service.startup_timeout_s, "placement group")
        refresh = self._refresh_point(name, service)
        workers = self._start_workers(name, service, group, bundles, refresh)
        infos = self._wait(
            name, [w.info.remote() for w in workers], service.startup_timeout_s, "startup check"
        )
        per_node = Counter(info["node_id"] for info in infos)
        endpoints = self._start_proxies(name, service, per_node)
        return ServiceHandle(name, endpoints, service.request_timeout_s, service.retries,
                             service.on_worker_loss, refresh)

    def _refresh_point(self, name: str, service: ServiceConfig) -> RefreshPoint | None:
        """Where training refreshes this service's weights: NCCL to GPU workers, else gloo.
        The store lives in this process; restarted workers find it by the same address."""
        if not service.refresh:
            return None
        if self.hub is None:
            self.hub = RefreshHub(ray.util.get_node_ip_address())
        return self.hub.point(name, "nccl" if service.gpus_per_worker > 0 else "gloo")

    def _start_workers(
        self, name: str, service: ServiceConfig, group: Any, bundles: tuple[Bundle, ...],
        refresh: RefreshPoint | None,
    ) -> list[Any]:
        workers: list[Any] = []
        for bundle_index, bundle in enumerate(bundles):
            for _ in range(bundle.workers):
                strategy = PlacementGroupSchedulingStrategy(group, bundle_index)
                workers.append(_Worker.options(
                    num_cpus=service.cpus_per_worker, num_gpus=service.gpus_per_worker,
                    max_restarts=service.max_restarts, scheduling_strategy=strategy,
                    name=f"gkr-{self.run_id}-{name}-{len(workers)}",
                ).remote(self.run_id, name, len(workers), service, self.config.ipc_dir,
                         self.config.report_interval_s, refresh))
        self.actors[name] = workers
        return workers

    def _start_proxies(
        self, name: str, service: ServiceConfig, per_node: Counter[str]
    ) -> tuple[Endpoint, ...]:
        proxies = {
            node: _Proxy.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                max_restarts=-1,
            ).remote(self.run_id, name, service, self.config.ipc_dir,
                     self.config.report_interval_s)
            for node in per_node
        }
        self.proxies[name] = list(proxies.values())
        addresses = self._wait(
            name, [p.addresses.remote() for p in proxies.values()], service.startup_timeout_s,
            "proxy start",
        )
        self._await_registration(name, service, proxies, per_node)
        return tuple(
            Endpoint(address, per_node[node], events)
            for node, (address, events) in zip(proxies, addresses, strict=True)
        )

    def _await_registration(
        self, name: str, service: ServiceConfig, proxies: dict[str, Any], per_node: Counter[str]
    ) -> None:
        """Every proxy must see all its node's workers before training may call them."""
        deadline = time.monotonic() + service.startup_timeout_s
        for node, proxy in proxies.items():
            while ray.get(proxy.ready_workers.remote()) < per_node[node]:
                if time.monotonic() > deadline:
                    raise AuxStartupError(f"service {name!r}: workers never reached the proxy")
                time.sleep(0.05)

    def _wait(self, name: str, refs: Any, timeout_s: float, what: str) -> Any:
        try:
            return ray.get(refs, timeout=timeout_s)
        except GetTimeoutError as error:
            raise AuxStartupError(f"service {name!r}: {what} not done in {timeout_s}s") from error
        except RayError as error:
            raise AuxStartupError(f"service {name!r}: {what} failed: {_cause(error)}") from error

    def shutdown(self) -> None:
        """Stop every actor (cleanly first, so sockets close), release the placement groups."""
        groups = (*self.actors.values(), *self.proxies.values())
        handles = [actor for group in groups for actor in group]
        stopping = [handle.stop.remote() for handle in handles]
        with contextlib.suppress(RayError):  # dead or stuck actors are killed below anyway
            ray.get(stopping, timeout=5)
        for handle in handles:
            ray.kill(handle, no_restart=True)
        for group in self.groups:
            remove_placement_group(group)
        self.actors, self.proxies, self.groups, self.hub = {}, {}, [], None
