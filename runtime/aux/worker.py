"""An auxiliary worker: a persistent Ray actor serving one service behind its node's proxy.

The worker talks to the proxy over one long-lived IPC socket. Requests go into one bounded
queue per training rank and are served round-robin (seed §5.2); a full queue answers BUSY at
once, which is the back-pressure the client sees. Serving and socket I/O share one thread
because ZeroMQ sockets must not be shared between threads.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from runtime.aux.fairqueue import FairQueues
from runtime.aux.services import AuxService
from runtime.aux.wire import (
    CONTROL,
    REQUEST,
    Status,
    decode_body,
    drain,
    encode_reply,
    read_descriptor,
    send_message,
    tune,
)
from runtime.fleet import WorkerSample

SAMPLE_CAP = 4096  # per report: enough for percentiles, bounded for the monitor
IDLE_POLL_MS = 50  # how long an idle worker waits before checking `stop` and reporting


@dataclass(slots=True)
class _Request:
    client: Any
    rid: int
    deadline: float
    head: bytes
    frames: list[Any]
    arrived: float


def backend_address(ipc_dir: str, run_id: str, service: str, node_id: str) -> str:
    """The IPC address where a node's proxy for `service` waits for its workers."""
    return f"ipc://{ipc_dir}/gkr-{run_id[:12]}-{service[:24]}-{node_id[:12]}.sock"


class WorkerCore:
    """The serving loop of one worker, independent of Ray so tests can drive it directly."""

    def __init__(
        self,
        service_name: str,
        worker_id: str,
        address: str,
        service: AuxService,
        queue_size: int,
        report: Callable[[WorkerSample], None] | None = None,
        report_interval_s: float = 1.0,
    ) -> None:
        self.service_name, self.worker_id, self.address = service_name, worker_id, address
        self.service, self.report, self.report_interval_s = service, report, report_interval_s
        self.incarnation = uuid.uuid4().hex
        self.queues: FairQueues[_Request] = FairQueues(queue_size)
        self._sample = WorkerSample(service_name, worker_id, self.incarnation, 0, 0, 0)
        self._next_report = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        """Serve until `stop` is set."""
        sock = tune(zmq.Context.instance().socket(zmq.DEALER))
        sock.setsockopt(zmq.IDENTITY, self.worker_id.encode())
        sock.connect(self.address)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        try:
            while not self.stop.is_set():
                self._tick(sock, poller)
        finally:
            sock.close()

    def _tick(self, sock: zmq.Socket, poller: zmq.Poller) -> None:
        # With work queued, only take what already arrived (drain does not block); idle, wait.
        if len(self.queues):
            self._intake(sock, ready=False)
        elif poller.poll(IDLE_POLL_MS):
            self._intake(sock, ready=True)
        request = self.queues.take()
        if request is not None:
            self._serve(sock, request)
        if time.monotonic() >= self._next_report:
            self._heartbeat(sock)

    def _intake(self, sock: zmq.Socket, ready: bool) -> None:
        """Move everything that arrived into the per-rank queues; refuse what does not fit."""
        for client, head, *frames in drain(sock, heads=2, ready=ready):
            rid, rank, deadline, _ = REQUEST.unpack_from(head)
            if not self.queues.offer(rank, _Request(client, rid, deadline, head, frames,
                                                    time.time())):
                send_message(sock, [client, *encode_reply(rid, Status.BUSY)])

    def _serve(self, sock: zmq.Socket, request: _Request) -> None:
        started = time.time()
        waited = started - request.arrived
        self._sample.queue_wait_s.append(waited)
        if request.deadline and started > request.deadline:
            reply = encode_reply(request.rid, Status.EXPIRED)
        else:
            reply = self._handle(request, started, waited)
        send_message(sock, [request.client, *reply])

    def _handle(self, request: _Request, started: float, waited: float) -> list[Any]:
        """The reply frames; every service error (or unsendable result) goes to the caller.
        The caller subtracts wait and processing from its round trip (transfer, seed §8.2)."""
        try:
            descriptor, offset = read_descriptor(request.head, REQUEST)
            payload = decode_body(descriptor, offset, request.head, request.frames)
            result = self.service.handle(descriptor["method"], payload)
            status, failure = Status.OK, None
        except Exception as error:
            self._sample.errors += 1
            status, result = Status.ERROR, None
            failure = {"error_type": type(error).__name__, "error": str(error)}
        processed = time.time() - started
        self._sample.process_s.append(processed)
        self._sample.served += 1
        try:
            return encode_reply(request.rid, status, result, (waited, processed), failure)
        except Exception as error:  # a result the wire cannot carry (not JSON, not a dict)
            failure = {"error_type": type(error).__name__, "error": f"reply: {error}"}
            return encode_reply(request.rid, Status.ERROR, None, (waited, processed), failure)

    def _heartbeat(self, sock: zmq.Socket) -> None:
        """Announce this incarnation to the proxy and report metrics to the FleetMonitor."""
        self._next_report = time.monotonic() + self.report_interval_s
        ready = {"type": "ready", "incarnation": self.incarnation}
        sock.send_multipart([CONTROL, json.dumps(ready).encode()])
        sample, self._sample = self._sample, WorkerSample(
            self.service_name, self.worker_id, self.incarnation, 0, 0, 0
        )
        sample.pending = len(self.queues)
        sample.queue_wait_s = sample.queue_wait_s[-SAMPLE_CAP:]
        sample.process_s = sample.process_s[-SAMPLE_CAP:]
        if self.report is not None:
            self.report(sample)

    def start_thread(self) -> threading.Thread:
        """Run the loop on a daemon thread."""
        thread = threading.Thread(target=self.run, name=f"aux-{self.worker_id}", daemon=True)
        thread.start()
        return thread
