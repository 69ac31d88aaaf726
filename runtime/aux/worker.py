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
from runtime.aux.wire import CONTROL, Status, decode_body, decode_header, drain, encode
from runtime.fleet import WorkerSample

SAMPLE_CAP = 4096  # per report: enough for percentiles, bounded for the monitor


@dataclass
class _Request:
    client: Any
    header: dict[str, Any]
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
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.worker_id.encode())
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.address)
        try:
            while not self.stop.is_set():
                self._tick(sock)
        finally:
            sock.close()

    def _tick(self, sock: zmq.Socket) -> None:
        if sock.poll(0 if len(self.queues) else 50):
            self._intake(sock)
        request = self.queues.take()
        if request is not None:
            self._serve(sock, request)
        if time.monotonic() >= self._next_report:
            self._heartbeat(sock)

    def _intake(self, sock: zmq.Socket) -> None:
        """Move everything that arrived into the per-rank queues; refuse what does not fit."""
        for client, head, *frames in drain(sock):
            header = decode_header(head)
            request = _Request(client, header, frames, time.time())
            if not self.queues.offer(int(header.get("rank", 0)), request):
                self._reply(sock, request, {"status": Status.BUSY}, None)

    def _serve(self, sock: zmq.Socket, request: _Request) -> None:
        started = time.time()
        waited = started - request.arrived
        self._sample.queue_wait_s.append(waited)
        deadline = request.header.get("deadline")
        if deadline is not None and started > deadline:
            self._reply(sock, request, {"status": Status.EXPIRED}, None)
            return
        status, result = self._handle(request)
        processed = time.time() - started
        self._sample.process_s.append(processed)
        self._sample.served += 1
        # The caller subtracts both from its round trip to see the transfer time (seed §8.2).
        timing = {"wait_s": waited, "process_s": processed}
        self._reply(sock, request, {**status, **timing}, result)

    def _handle(self, request: _Request) -> tuple[dict[str, Any], Any]:
        try:
            payload = decode_body(request.header, request.frames)
            return {"status": Status.OK}, self.service.handle(request.header["method"], payload)
        except Exception as error:  # every service error goes back to the caller
            self._sample.errors += 1
            return {"status": Status.ERROR, "error_type": type(error).__name__,
                    "error": str(error)}, None

    def _reply(
        self, sock: zmq.Socket, request: _Request, status: dict[str, Any], payload: Any
    ) -> None:
        header = {"id": request.header["id"], **status}
        sock.send_multipart([request.client, *encode(header, payload)], copy=False)

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
