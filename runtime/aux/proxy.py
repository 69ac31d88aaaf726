"""The per-node proxy of one service: ZeroMQ TCP in front, IPC to the node's workers behind.

Training ranks send to the frontend (ROUTER on TCP); the proxy forwards each request to the
next ready worker in round-robin order (seed §5.2) and routes the reply back. It tracks
requests in flight so that when a worker restarts (a new incarnation announces itself) they
are retried on another worker or failed, by the service's policy, and it answers EXPIRED
for requests whose deadline passes while they wait.
"""

from __future__ import annotations

import errno
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from runtime.aux.config import OnWorkerLoss
from runtime.aux.wire import (
    CONTROL,
    REQUEST,
    Status,
    drain,
    encode_reply,
    request_id,
    send_message,
    tune,
)
from runtime.fleet import ProxySample

MAX_ATTEMPTS = 3  # a request that killed three workers is failed rather than retried again
SWEEP_INTERVAL_S = 0.05
POLL_MS = 50  # an idle proxy still sweeps deadlines and reports this often


def _remove_ipc_file(address: str) -> None:
    """libzmq unlinks the file on its I/O thread, which may not run before the actor exits."""
    if address.startswith("ipc://"):
        Path(address.removeprefix("ipc://")).unlink(missing_ok=True)


@dataclass(slots=True)
class _Flight:
    client: bytes  # the client's routing identity
    key: tuple[bytes, int]  # (client identity, request id): unique among requests in flight
    frames: list[Any]
    deadline: float  # wall clock; 0: none
    worker: bytes | None = None
    attempts: int = 0


class ProxyCore:
    """The forwarding loop, independent of Ray so that tests can drive it directly."""

    def __init__(
        self,
        service: str,
        proxy_id: str,
        host: str,
        backend: str,
        on_worker_loss: OnWorkerLoss,
        report: Callable[[ProxySample], None] | None = None,
        report_interval_s: float = 1.0,
    ) -> None:
        self.service, self.proxy_id, self.on_worker_loss = service, proxy_id, on_worker_loss
        self.report, self.report_interval_s = report, report_interval_s
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.frontend = tune(context.socket(zmq.ROUTER))
        port = self.frontend.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.backend = tune(context.socket(zmq.ROUTER))
        self.backend.setsockopt(zmq.ROUTER_MANDATORY, 1)  # sending to a dead worker raises
        # A restarted worker reuses its identity; it must take over even if the dead one's
        # connection is not reaped yet (the default refuses the newcomer, losing its hello).
        self.backend.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.backend.bind(backend)
        self.backend_address = backend
        self.workers: dict[bytes, str] = {}  # worker id -> incarnation
        self.ready: list[bytes] = []
        self._turn = 0
        self.in_flight: dict[tuple[bytes, int], _Flight] = {}
        self.waiting: deque[_Flight] = deque()
        self.stop = threading.Event()
        self._next_sweep = self._next_report = 0.0

    def run(self) -> None:
        """Forward until `stop` is set, then close both sockets."""
        poller = zmq.Poller()
        poller.register(self.frontend, zmq.POLLIN)
        poller.register(self.backend, zmq.POLLIN)
        try:
            while not self.stop.is_set():
                for sock, _ in poller.poll(POLL_MS):
                    if sock is self.frontend:
                        self._from_clients()
                    else:
                        self._from_workers()
                self._housekeeping()
        finally:
            self.frontend.close()
            self.backend.close()
            _remove_ipc_file(self.backend_address)

    def _from_clients(self) -> None:
        """Route on the binary prefix alone; the descriptor and arrays pass through unread."""
        for client, head, *rest in drain(self.frontend, heads=2, ready=True):
            rid, _, deadline, _ = REQUEST.unpack_from(head)
            self._dispatch(_Flight(client, (client, rid), [head, *rest], deadline))

    def _from_workers(self) -> None:
        for worker, client, *rest in drain(self.backend, heads=3, ready=True):
            if client == CONTROL:
                self._control(worker, json.loads(rest[0]))
                continue
            self.in_flight.pop((client, request_id(rest[0])), None)
            send_message(self.frontend, [client, *rest])

    def _dispatch(self, flight: _Flight) -> None:
        """Send to the next ready worker; park the request if none is ready."""
        while self.ready:
            worker = self.ready[self._turn % len(self.ready)]
            self._turn += 1
            try:
                send_message(self.backend, [worker, flight.client, *flight.frames])
            except zmq.ZMQError as error:
                if error.errno != errno.EHOSTUNREACH:
                    raise
                self.ready.remove(worker)  # its socket is gone; it returns when it restarts
                continue
            flight.worker, flight.attempts = worker, flight.attempts + 1
            self.in_flight[flight.key] = flight
            return
        self.waiting.append(flight)

    def _control(self, worker: bytes, message: dict[str, Any]) -> None:
        incarnation = message.get("incarnation", "")
        previous = self.workers.get(worker)
        self.workers[worker] = incarnation
        if previous is not None and previous != incarnation:
            self._worker_lost(worker)
        if worker not in self.ready:
            self.ready.append(worker)
        while self.waiting and self.ready:
            self._dispatch(self.waiting.popleft())

    def _worker_lost(self, worker: bytes) -> None:
        """The worker restarted: what it held in flight is retried or failed by policy."""
        lost = [f for f in self.in_flight.values() if f.worker == worker]
        for flight in lost:
            del self.in_flight[flight.key]
            retry = self.on_worker_loss is OnWorkerLoss.RETRY and flight.attempts < MAX_ATTEMPTS
            if retry:
                self._dispatch(flight)
            else:
                self._answer(flight, Status.LOST)

    def _answer(self, flight: _Flight, status: int) -> None:
        send_message(self.frontend, [flight.client, *encode_reply(flight.key[1], status)])

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL_S
            self._expire(time.time())
        if now >= self._next_report:
            self._next_report = now + self.report_interval_s
            if self.report is not None:
                self.report(self._sample())

    def _expire(self, wall: float) -> None:
        """Answer EXPIRED for requests whose deadline passed while parked or in flight."""
        expired = [f for f in self.in_flight.values() if f.deadline and f.deadline < wall]
        for flight in expired:
            del self.in_flight[flight.key]
            self._answer(flight, Status.EXPIRED)
        parked = [f for f in self.waiting if f.deadline and f.deadline < wall]
        for flight in parked:
            self.waiting.remove(flight)
            self._answer(flight, Status.EXPIRED)

    def _sample(self) -> ProxySample:
        return ProxySample(
            self.service, self.proxy_id, len(self.in_flight), len(self.waiting), len(self.ready)
        )

    def start_thread(self) -> threading.Thread:
        """Run the loop on a daemon thread."""
        thread = threading.Thread(target=self.run, name=f"proxy-{self.service}", daemon=True)
        thread.start()
        return thread
