"""One proxy and its workers over real ZeroMQ sockets, in threads of the test process."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from runtime.aux.client import AuxClient, Endpoint, ServiceHandle
from runtime.aux.config import OnWorkerLoss
from runtime.aux.proxy import ProxyCore
from runtime.aux.refresh import RefreshPoint
from runtime.aux.services import EchoService
from runtime.aux.worker import WorkerCore


class Fabric:
    """One proxy and its workers on a private IPC path."""

    def __init__(self, tmp: Path, policy: OnWorkerLoss, queue_size: int) -> None:
        self.backend = f"ipc://{tmp}/proxy.sock"
        self.proxy = ProxyCore("echo", "p", "127.0.0.1", self.backend)
        self.policy, self.queue_size = policy, queue_size
        self.threads = [self.proxy.start_thread()]
        self.workers: list[WorkerCore] = []

    def add_worker(
        self, worker_id: str, service: Any = None, refresh: RefreshPoint | None = None
    ) -> WorkerCore:
        service = service or EchoService()
        core = WorkerCore("echo", worker_id, self.backend, service, self.queue_size,
                          refresh=refresh)
        self.threads.append(core.start_thread())
        self.workers.append(core)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            known = self.proxy.workers.get(worker_id)
            if known is not None and known.incarnation == core.incarnation:
                break
            time.sleep(0.01)
        return core

    def client(
        self, rank: int, timeout_s: float = 30.0, retries: int = 0,
        refresh: RefreshPoint | None = None,
    ) -> AuxClient:
        endpoint = Endpoint(self.proxy.address, 1, self.proxy.events_address)
        handle = ServiceHandle("echo", (endpoint,), timeout_s, retries, self.policy, refresh)
        return AuxClient(handle, rank)

    def close(self) -> None:
        self.proxy.stop.set()
        for worker in self.workers:
            worker.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
