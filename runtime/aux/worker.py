"""An auxiliary worker: a persistent Ray actor serving one service behind its node's proxy.

The worker takes requests from the proxy over one long-lived IPC socket. Requests go into one
bounded queue per client connection (the routing identity the proxy's ROUTER gave it, which a
peer cannot choose per request, unlike the rank a request claims) and are served round-robin
(seed §5.2); a full queue, or a worker holding `queue_total` requests in all, answers BUSY at
once, which is the back-pressure the client sees. Serving and socket I/O share one thread
because ZeroMQ sockets must not be shared between threads; a request that finds the worker
idle and nothing else waiting is served at once, without passing through the queues.

Every message is checked by the wire decoder (runtime.aux.wire) before it is queued: one that
is not a request of this layer is dropped, logged with the peer's routing identity and
counted (`malformed`), and the serving thread goes on. Should the thread end for any other
reason, the worker says so (`failure`, `healthy`) and calls `on_death`: the Ray actor ends its
process there, so that Ray replaces it like any crashed worker (runtime.aux.actors).

The worker announces itself (id, incarnation, requests queued) through the same socket, to
the proxy's control peer (runtime.aux.proxy): so the proxy counts a worker as ready only
once its link works both ways, and learns from a new incarnation that a restarted worker
lost what it held. A probe (runtime.aux.wire) is answered out of turn with the ids of the
asking client's requests still queued here, and every reply carries this incarnation's tag,
so that a client can tell exactly which of its requests a lost worker took with it.

A service whose weights training refreshes (runtime.aux.refresh) gets each new version
between two requests, so no request sees half of one; a request asking for a newer version
than the worker has is answered STALE, for the client to send again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import zmq

from runtime.aux.errors import WireError
from runtime.aux.fairqueue import FairQueues
from runtime.aux.proxy import CONTROL_ID
from runtime.aux.refresh import RefreshableService, RefreshError, RefreshPoint, WeightSubscriber
from runtime.aux.services import AuxService
from runtime.aux.wire import (
    REQUEST,
    Status,
    decode_body,
    drain,
    encode_reply,
    read_descriptor,
    read_head,
    recv_message,
    send_message,
    tune,
    waiting,
)
from runtime.fleet import WorkerSample

log = logging.getLogger(__name__)

SAMPLE_CAP = 4096  # per report: enough for percentiles, bounded for the monitor
IDLE_POLL_MS = 50  # how long an idle worker waits before checking `stop` and reporting
LOGGED_DROPS = 10  # malformed messages logged one by one; after these, every LOG_EVERY-th
LOG_EVERY = 1000


@dataclass(slots=True)
class _Request:
    client: bytes  # the proxy's routing identity of the client's connection
    rid: int
    min_version: int
    deadline: float
    method: str
    payload: dict[str, Any]  # decoded and checked on arrival; views of the frames
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
        refresh: RefreshPoint | None = None,
        queue_total: int | None = None,
        on_death: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.service_name, self.worker_id, self.address = service_name, worker_id, address
        self.service, self.report, self.report_interval_s = service, report, report_interval_s
        self.incarnation = uuid.uuid4().hex
        self.tag = int(self.incarnation[:16], 16)  # names this incarnation in every reply
        self.version = 0  # of the weights in use; 0: the service's own
        self.subscriber = self._subscribe(refresh)
        self.queues: FairQueues[bytes, _Request] = FairQueues(queue_size, queue_total)
        self.malformed = 0  # messages dropped because the wire decoder refused them
        self.failure: BaseException | None = None  # what ended the serving thread
        self.on_death = on_death
        self._sample = WorkerSample(service_name, worker_id, self.incarnation, 0, 0, 0)
        self._next_report = 0.0
        self.stop = threading.Event()

    def _subscribe(self, refresh: RefreshPoint | None) -> WeightSubscriber | None:
        if refresh is None:
            return None
        if not isinstance(self.service, RefreshableService):
            raise RefreshError(f"service {self.service_name!r} has no load_weights method, "
                               "so its weights cannot be refreshed")
        return WeightSubscriber(refresh, self.worker_id)

    @property
    def healthy(self) -> bool:
        """False once the serving thread ended other than by `stop`."""
        return self.failure is None

    def run(self) -> None:
        """Serve until `stop` is set; an error that ends the loop is recorded, reported
        through `on_death` and raised again (the thread ends with it)."""
        try:
            self._loop()
        except BaseException as error:
            self.failure = error
            log.critical("%s: the serving thread ended: %r", self.worker_id, error)
            if self.on_death is not None:
                self.on_death(error)
            raise

    def _loop(self) -> None:
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        sock = tune(context.socket(zmq.DEALER))
        sock.rcvtimeo = IDLE_POLL_MS  # an idle worker's blocking receive returns this often
        sock.connect(self.address)
        try:
            while not self.stop.is_set():
                self._tick(sock)
        finally:
            sock.close()
            if self.subscriber is not None:
                self.subscriber.close()

    def _tick(self, sock: zmq.Socket) -> None:
        if self.subscriber is not None:
            self._refresh(self.subscriber)
        request = self._next(sock)
        if request is not None:
            self._serve(sock, request)
        if time.monotonic() >= self._next_report:
            self._heartbeat(sock)

    def _next(self, sock: zmq.Socket) -> _Request | None:
        """The request to serve now. Idle (the queues empty and nothing waiting), the worker
        sleeps in one blocking receive until a request comes or IDLE_POLL_MS pass; that
        request has no one to be fair to and is served at once. Otherwise everything that
        arrived is taken into the bounded fair queues first (drain does not block), so that
        they choose among all of it and refuse what does not fit. The look for waiting
        messages comes before the sleep, while the last reply travels, not after it."""
        if not self.queues and not waiting(sock):
            try:
                return self._take_in(sock, recv_message(sock, heads=2, block=True))
            except zmq.Again:
                return None
        for message in drain(sock, heads=2):
            request = self._take_in(sock, message)
            if request is not None:
                self._admit(sock, request)
        return self.queues.take()

    def _take_in(self, sock: zmq.Socket, message: list[Any]) -> _Request | None:
        """A received request, checked whole; None for a probe, which is answered here, and
        for a message the wire decoder refuses, which is dropped."""
        client, head, *frames = message
        try:
            rid, _, min_version, deadline, length = read_head(head, REQUEST)
            if not length and len(head) == REQUEST.size and not frames:
                self._answer_probe(sock, client, rid)
                return None
            descriptor, offset = read_descriptor(head, REQUEST)
            if not descriptor:
                raise WireError("a request with neither descriptor nor probe head")
            payload = decode_body(descriptor, offset, head, frames)
        except WireError as error:
            self._drop(client, error)
            return None
        return _Request(client, rid, min_version, deadline, descriptor["method"], payload,
                        time.time())

    def _drop(self, client: bytes, error: WireError) -> None:
        self.malformed += 1
        if self.malformed <= LOGGED_DROPS or not self.malformed % LOG_EVERY:
            log.warning("%s: dropped a malformed message from peer %s (%d so far): %s",
                        self.worker_id, client.hex(), self.malformed, error)

    def _answer_probe(self, sock: zmq.Socket, client: bytes, rid: int) -> None:
        """The ids of the requests of `client` that wait here. None is in service (this
        thread is), and the replies of those served already went out before this answer."""
        held = np.array([r.rid for r in self.queues if r.client == client], dtype=np.uint64)
        reply = encode_reply(rid, Status.HELD, {"held": held}, worker=self.tag)
        send_message(sock, [client, *reply])

    def _admit(self, sock: zmq.Socket, request: _Request) -> None:
        """Queue one request for its connection, or refuse it when that connection's queue
        or the worker's total is full."""
        if not self.queues.offer(request.client, request):
            reply = encode_reply(request.rid, Status.BUSY, worker=self.tag)
            send_message(sock, [request.client, *reply])

    def _serve(self, sock: zmq.Socket, request: _Request) -> None:
        started = time.time()
        waited = started - request.arrived
        self._sample.queue_wait_s.append(waited)
        if request.deadline and started > request.deadline:
            reply = encode_reply(request.rid, Status.EXPIRED, worker=self.tag)
        elif request.min_version > self.version or (
            self.subscriber is not None and self.subscriber.floor > self.version
        ):
            reply = encode_reply(request.rid, Status.STALE, worker=self.tag)
        else:
            reply = self._handle(request, started, waited)
        send_message(sock, [request.client, *reply])

    def _refresh(self, subscriber: WeightSubscriber) -> None:
        """Swap in the newest version received, between two requests."""
        staged = subscriber.take()
        if staged is None:
            return
        version, tensors = staged
        try:
            cast(RefreshableService, self.service).load_weights(tensors, version)
        except Exception:  # the service refused it: keep serving the version it has
            log.exception("%s refused weight version %d", self.worker_id, version)
            return
        self.version = version

    def _handle(self, request: _Request, started: float, waited: float) -> list[Any]:
        """The reply frames; every service error (or unsendable result) goes to the caller.
        The caller subtracts wait and processing from its round trip (transfer, seed §8.2)."""
        try:
            result = self.service.handle(request.method, request.payload)
            status, failure = Status.OK, None
        except Exception as error:
            self._sample.errors += 1
            status, result = Status.ERROR, None
            failure = {"error_type": type(error).__name__, "error": str(error)}
        processed = time.time() - started
        self._sample.process_s.append(processed)
        self._sample.served += 1
        timing = (waited, processed)
        try:
            return encode_reply(request.rid, status, result, timing, failure, self.tag)
        except Exception as error:  # a result the wire cannot carry (not JSON, not a dict)
            failure = {"error_type": type(error).__name__, "error": f"reply: {error}"}
            return encode_reply(request.rid, Status.ERROR, None, timing, failure, self.tag)

    def _heartbeat(self, sock: zmq.Socket) -> None:
        """Announce this incarnation to the proxy through the request socket (until it is
        linked, the announcement waits in the socket) and report metrics to the
        FleetMonitor."""
        self._next_report = time.monotonic() + self.report_interval_s
        ready = {"worker": self.worker_id, "incarnation": self.incarnation, "tag": self.tag,
                 "pending": len(self.queues)}
        with contextlib.suppress(zmq.Again):  # a full link drops it: the next one follows
            sock.send_multipart([CONTROL_ID, json.dumps(ready).encode()], zmq.NOBLOCK)
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
