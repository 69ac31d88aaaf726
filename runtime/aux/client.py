"""The training-rank side of the remote-call layer: ZeroMQ DEALERs to every proxy of a service.

Requests are spread over proxies by smooth weighted round-robin, each proxy weighted by its
worker count, with no spatial affinity (seed §5.2). Each request carries an id, the caller's
rank (for the workers' fair queues) and a deadline; replies are matched by id, so several
requests may be in flight. Deadlines are wall-clock times, which assumes the cluster's clocks
are synchronised (NTP), as they are on GKE nodes.

The client also applies the service's worker-loss policy. A proxy is a libzmq device that
cannot tell which worker holds a request, so when it announces that one of its workers
restarted, every request still pending at that proxy may have been lost: under `retry` the
client sends each again (at most MAX_ATTEMPTS times; the first reply wins, a later duplicate
is dropped), under `fail` each raises WorkerLost, which `call` retries like a timeout. A
request that a live worker held is then served twice or failed needlessly; with one worker
per proxy the set is exact. A client that misses the notice (it connected after it) falls
back on the request's deadline.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq

from runtime.aux.config import OnWorkerLoss
from runtime.aux.errors import AuxBusy, AuxError, AuxTimeout, RemoteError, WorkerLost
from runtime.aux.refresh import RefreshPoint
from runtime.aux.wire import (
    REPLY,
    Status,
    decode_body,
    drain,
    encode_reply,
    encode_request,
    read_descriptor,
    recv_message,
    request_id,
    send_message,
    tune,
)
from runtime.fleet import ClientSample

BUSY_BACKOFF_S = 0.005
SAMPLE_CAP = 4096
MAX_ATTEMPTS = 3  # a request lost with three workers is failed rather than sent again
STALE_BACKOFF_S, STALE_BACKOFF_MAX_S = 0.0005, 0.05
# A waiting client looks at the proxies' loss notices this often; a reply wakes it sooner.
NOTICE_CHECK_S = 0.1
_SERVED = (Status.OK, Status.ERROR)  # replies that carry the worker's timings


@dataclass(frozen=True)
class Endpoint:
    """One proxy: its TCP address, its weight (the workers behind it) and the address where
    it publishes worker-loss notices (empty: none)."""

    address: str
    weight: int
    events: str = ""


@dataclass(slots=True)
class _Pending:
    deadline: float  # wall clock
    sent: float  # perf_counter at the first send
    proxy: int  # index of the endpoint it went to; its reply comes back on that socket
    frames: list[Any]  # kept to send again after a worker loss or a STALE answer
    attempts: int = 1  # sends after worker losses
    stale: int = 0  # STALE answers so far


@dataclass(frozen=True)
class ServiceHandle:
    """Everything a training rank needs to reach one service; small and picklable."""

    service: str
    endpoints: tuple[Endpoint, ...]
    timeout_s: float
    retries: int
    on_worker_loss: OnWorkerLoss = OnWorkerLoss.RETRY
    refresh: RefreshPoint | None = None  # where training publishes the workers' weights


class WeightedRoundRobin:
    """Smooth weighted round-robin: picks in proportion to weight, interleaved. The picks
    repeat every sum(weights) turns, so that cycle is computed once and replayed."""

    def __init__(self, weights: Sequence[int]) -> None:
        if not weights or min(weights) < 1:
            raise ValueError(f"weights must be positive, got {list(weights)}")
        self.weights = list(weights)
        self._cycle = itertools.cycle(self._one_period())

    def _one_period(self) -> list[int]:
        current, total, picks = [0] * len(self.weights), sum(self.weights), []
        for _ in range(total):
            for index, weight in enumerate(self.weights):
                current[index] += weight
            best = max(range(len(self.weights)), key=current.__getitem__)
            current[best] -= total
            picks.append(best)
        return picks

    def next(self) -> int:
        """Index of the next pick."""
        return next(self._cycle)


class AuxClient:
    """Calls one service from one training rank."""

    def __init__(
        self,
        handle: ServiceHandle,
        rank: int,
        report: Callable[[ClientSample], None] | None = None,
        report_interval_s: float = 1.0,
    ) -> None:
        self.handle, self.rank = handle, rank
        self.report, self.report_interval_s = report, report_interval_s
        self._transfers: list[float] = []
        self._next_report = time.monotonic() + report_interval_s
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._sockets = [tune(context.socket(zmq.DEALER)) for _ in handle.endpoints]
        self._notices = [self._subscribe(context, e.events) for e in handle.endpoints]
        for sock, endpoint in zip(self._sockets, handle.endpoints, strict=True):
            sock.connect(endpoint.address)
        self._waits = [-1] * len(self._sockets)  # each socket's RCVTIMEO now (ms)
        self._picker = WeightedRoundRobin([e.weight for e in handle.endpoints])
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._done: dict[int, list[Any]] = {}  # id -> reply frames
        self._next_check = 0.0

    @staticmethod
    def _subscribe(context: zmq.Context[Any], address: str) -> zmq.Socket | None:
        if not address:
            return None
        sock = tune(context.socket(zmq.SUB))
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(address)
        return sock

    def call(
        self, method: str, payload: dict[str, Any] | None = None, min_version: int = 0
    ) -> dict[str, Any]:
        """One request, retried after a timeout, a lost worker or back-pressure. With
        `min_version`, only a worker holding that weight version or a newer one serves it."""
        failure: AuxError | None = None
        for _ in range(self.handle.retries + 1):
            try:
                return self.result(self.submit(method, payload, min_version))
            except AuxBusy as error:
                failure = error
                time.sleep(BUSY_BACKOFF_S)
            except (AuxTimeout, WorkerLost) as error:
                failure = error
        assert failure is not None
        raise failure

    def submit(
        self, method: str, payload: dict[str, Any] | None = None, min_version: int = 0
    ) -> int:
        """Send without waiting; returns the request id for `result`. Arrays of the payload
        are sent from their own memory: leave them unchanged until the result."""
        rid = next(self._ids)
        deadline = time.time() + self.handle.timeout_s
        frames = encode_request(rid, self.rank, deadline, method, payload, min_version)
        proxy = self._picker.next()
        send_message(self._sockets[proxy], frames)
        self._pending[rid] = _Pending(deadline, time.perf_counter(), proxy, frames)
        return rid

    def result(self, rid: int) -> dict[str, Any]:
        """Wait for the reply of `rid`; raises the typed error the reply carries."""
        entry = self._pending[rid]
        while not self._answered(rid, entry):
            remaining = entry.deadline - time.time()
            if remaining <= 0:
                del self._pending[rid]  # a late reply is dropped
                raise AuxTimeout(f"{self.handle.service}: no reply in {self.handle.timeout_s}s")
            self._receive(entry.proxy, remaining)
            if time.monotonic() >= self._next_check:
                self._check_notices()
        del self._pending[rid]
        head, *frames = self._done.pop(rid)
        _, status, wait_s, process_s, _ = REPLY.unpack_from(head)
        first_try = entry.attempts == 1 and not entry.stale
        if self.report is not None and status in _SERVED and first_try:
            self._observe(time.perf_counter() - entry.sent - wait_s - process_s)
        return self._unpack(status, head, frames)

    def _answered(self, rid: int, entry: _Pending) -> bool:
        """Whether `rid` has its reply; a STALE one sends the request again instead."""
        message = self._done.get(rid)
        if message is None:
            return False
        if REPLY.unpack_from(message[0])[1] != Status.STALE:
            return True
        self._resend_later(rid, entry)
        return False

    def _resend_later(self, rid: int, entry: _Pending) -> None:
        """The worker's weights were older than the request asked for: after a short wait
        (longer each time, up to STALE_BACKOFF_MAX_S), send it again; the proxy hands it to
        the next worker, and this one may have caught up meanwhile."""
        del self._done[rid]
        entry.stale += 1
        time.sleep(min(STALE_BACKOFF_S * 2 ** min(entry.stale, 8), STALE_BACKOFF_MAX_S))
        send_message(self._sockets[entry.proxy], entry.frames)

    def _receive(self, proxy: int, remaining_s: float) -> None:
        """Take one reply that came from `proxy`, waiting up to the next notice check. Others
        stay queued in the socket until a caller waits for them."""
        sock = self._sockets[proxy]
        wait_ms = max(1, int(min(remaining_s, NOTICE_CHECK_S) * 1000))
        if self._waits[proxy] != wait_ms:
            sock.rcvtimeo = self._waits[proxy] = wait_ms
        with contextlib.suppress(zmq.Again):
            self._store(recv_message(sock, heads=1, block=True))

    def _store(self, message: list[Any]) -> None:
        """Keep a reply whose request still waits; drop one for a request that timed out
        or was already answered (the duplicate of a request sent again)."""
        rid = request_id(message[0])
        if rid in self._pending and rid not in self._done:
            self._done[rid] = message

    def _check_notices(self) -> None:
        self._next_check = time.monotonic() + NOTICE_CHECK_S
        for proxy, sock in enumerate(self._notices):
            if sock is None:
                continue
            lost = False
            for _ in drain(sock, heads=1):
                lost = True
            if lost:
                self._worker_lost(proxy)

    def _worker_lost(self, proxy: int) -> None:
        """A worker behind `proxy` restarted: its requests in flight are gone, and which
        ones it held the proxy cannot tell, so the policy applies to all pending there."""
        retry = self.handle.on_worker_loss is OnWorkerLoss.RETRY
        for rid, entry in self._pending.items():
            if entry.proxy != proxy or rid in self._done:
                continue
            if retry and entry.attempts < MAX_ATTEMPTS:
                entry.attempts += 1
                send_message(self._sockets[proxy], entry.frames)
            else:
                self._done[rid] = encode_reply(rid, Status.LOST)

    def _observe(self, transfer_s: float) -> None:
        """Transfer time = round trip - queue wait - processing; reported now and then."""
        self._transfers.append(transfer_s)
        if time.monotonic() >= self._next_report:
            self._flush_transfers()

    def _flush_transfers(self) -> None:
        self._next_report = time.monotonic() + self.report_interval_s
        if self.report is not None and self._transfers:
            sample = ClientSample(self.handle.service, self.rank, self._transfers[-SAMPLE_CAP:])
            self._transfers = []
            self.report(sample)

    def _unpack(self, status: int, head: bytes, frames: list[Any]) -> dict[str, Any]:
        service = self.handle.service
        if status == Status.OK:
            descriptor, offset = read_descriptor(head, REPLY)
            return decode_body(descriptor, offset, head, frames)
        if status == Status.ERROR:
            failure, _ = read_descriptor(head, REPLY)
            raise RemoteError(service, failure.get("error_type", "Error"), failure.get("error", ""))
        if status == Status.BUSY:
            raise AuxBusy(f"{service}: rank {self.rank}'s queue is full")
        if status == Status.LOST:
            raise WorkerLost(f"{service}: the worker died with the request in flight")
        raise AuxTimeout(f"{service}: deadline passed before the request was served")

    def close(self) -> None:
        """Report the transfer times still held (short runs), then close the sockets."""
        self._flush_transfers()
        for sock in [*self._sockets, *self._notices]:
            if sock is not None:
                sock.close()
