"""The Ray actors that host a worker loop or a proxy loop (thin wrappers over the cores).

Methods called through an actor handle carry a bare `@ray.method`: it returns the method
unchanged, and it is what types `handle.method.remote(...)` for mypy.
"""

from __future__ import annotations

import gc
import logging
import os
from typing import Any

import ray

from runtime.aux.config import ServiceConfig
from runtime.aux.proxy import ProxyCore
from runtime.aux.refresh import RefreshPoint
from runtime.aux.services import CheckpointableService, build_service
from runtime.aux.worker import WorkerCore, backend_address
from runtime.fleet import monitor_name
from runtime.identity import listen_host


def _reporter(run_id: str, method: str) -> Any:
    """Fire-and-forget reports to the run's FleetMonitor; a no-op when it is absent."""
    try:
        monitor = ray.get_actor(monitor_name(run_id))
    except ValueError:
        return None
    return lambda sample: getattr(monitor, method).remote(sample)


def _end_process(error: BaseException) -> None:
    """A worker whose serving thread ended serves nothing: end its process, so that Ray
    restarts the actor (its `max_restarts`) like any crashed worker, and the proxy's
    notice of the new incarnation applies the loss policy to what it held
    (runtime.aux.proxy). The thread has logged `error`; flush it before leaving."""
    logging.shutdown()
    os._exit(70)  # EX_SOFTWARE: an internal error, not a clean exit


class AuxWorkerActor:
    """A persistent worker of one service; its constructor is the startup check."""

    def __init__(
        self, run_id: str, service: str, index: int, config: ServiceConfig, ipc_dir: str,
        report_interval_s: float, refresh: RefreshPoint | None = None,
    ) -> None:
        self.node_id = ray.get_runtime_context().get_node_id()
        implementation = build_service(f"aux.services.{service}", config.impl, config.options)
        implementation.startup_check()
        self.core = WorkerCore(
            service_name=service,
            worker_id=f"{service}-{index}",
            address=backend_address(ipc_dir, run_id, service, self.node_id),
            service=implementation,
            queue_size=config.queue_size,
            report=_reporter(run_id, "record_worker"),
            report_interval_s=report_interval_s,
            refresh=refresh,
            queue_total=config.queue_total,
            on_death=_end_process,
        )
        # What start-up built (Ray, torch, the service) lives as long as the process: out of
        # the collector's sight, a full collection no longer walks it between two requests.
        gc.freeze()
        self.thread = self.core.start_thread()

    @ray.method
    def info(self) -> dict[str, Any]:
        """Where this worker runs, which incarnation it is, whether it serves, and how many
        malformed messages it dropped."""
        return {"node_id": self.node_id, "pid": os.getpid(), "incarnation": self.core.incarnation,
                "healthy": self._serving(), "malformed": self.core.malformed}

    @ray.method
    def healthy(self) -> bool:
        """Whether the serving thread runs (False once it ended, or after `stop`)."""
        return self._serving()

    def _serving(self) -> bool:
        return self.core.healthy and self.thread.is_alive()

    @ray.method
    def checkpointable(self) -> bool:
        """Whether the service has state to checkpoint."""
        return isinstance(self.core.service, CheckpointableService)

    @ray.method
    def save_checkpoint(self, uri: str) -> None:
        """Have the service save its state under `uri`."""
        self._checkpointable().save_checkpoint(uri)

    @ray.method
    def load_checkpoint(self, uri: str) -> None:
        """Have the service restore the state saved under `uri`."""
        self._checkpointable().load_checkpoint(uri)

    def _checkpointable(self) -> CheckpointableService:
        service = self.core.service
        if not isinstance(service, CheckpointableService):
            raise TypeError(f"service {self.core.service_name!r} has no checkpoint methods")
        return service

    @ray.method
    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.core.stop.set()
        self.thread.join(timeout=2)


class AuxProxyActor:
    """The proxy of one service on one node."""

    def __init__(
        self, run_id: str, service: str, config: ServiceConfig, ipc_dir: str,
        report_interval_s: float,
    ) -> None:
        node_id = ray.get_runtime_context().get_node_id()
        self.core = ProxyCore(
            service=service,
            proxy_id=node_id[:12],
            host=listen_host(),
            backend=backend_address(ipc_dir, run_id, service, node_id),
            report=_reporter(run_id, "record_proxy"),
            report_interval_s=report_interval_s,
        )
        self.thread = self.core.start_thread()

    @ray.method
    def addresses(self) -> tuple[str, str]:
        """The TCP addresses training ranks connect to: requests, and loss notices."""
        return self.core.address, self.core.events_address

    @ray.method
    def ready_workers(self) -> int:
        """How many workers have announced themselves."""
        return len(self.core.ready)

    @ray.method
    def stop(self) -> None:
        """Stop forwarding; closing the bound IPC socket removes its file."""
        self.core.stop.set()
        self.thread.join(timeout=2)


