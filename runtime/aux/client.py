"""The training-rank side of the remote-call layer: ZeroMQ DEALERs to every proxy of a service.

Requests are spread over proxies by smooth weighted round-robin, each proxy weighted by its
worker count, with no spatial affinity (seed §5.2). Each request carries an id, the caller's
rank (for the workers' fair queues) and a deadline; replies are matched by id, so several
requests may be in flight. Deadlines are wall-clock times, which assumes the cluster's clocks
are synchronised (NTP), as they are on GKE nodes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq

from runtime.aux.errors import AuxBusy, AuxError, AuxTimeout, RemoteError, WorkerLost
from runtime.aux.wire import (
    REPLY,
    Status,
    decode_body,
    drain,
    encode_request,
    read_descriptor,
    request_id,
    send_message,
    tune,
)
from runtime.fleet import ClientSample

BUSY_BACKOFF_S = 0.005
SAMPLE_CAP = 4096
_SERVED = (Status.OK, Status.ERROR)  # replies that carry the worker's timings


@dataclass(frozen=True)
class Endpoint:
    """One proxy: its TCP address and its weight (the workers behind it)."""

    address: str
    weight: int


@dataclass(frozen=True)
class ServiceHandle:
    """Everything a training rank needs to reach one service; small and picklable."""

    service: str
    endpoints: tuple[Endpoint, ...]
    timeout_s: float
    retries: int


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
        self._poller = zmq.Poller()
        for sock, endpoint in zip(self._sockets, handle.endpoints, strict=True):
            sock.connect(endpoint.address)
            self._poller.register(sock, zmq.POLLIN)
        self._picker = WeightedRoundRobin([e.weight for e in handle.endpoints])
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[float, float]] = {}  # id -> (deadline, sent at)
        self._done: dict[int, list[Any]] = {}  # id -> reply frames
        self._abandoned: set[int] = set()

    def call(self, method: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request, retried after a timeout, a lost worker or back-pressure."""
        failure: AuxError | None = None
        for _ in range(self.handle.retries + 1):
            try:
                return self.result(self.submit(method, payload))
            except AuxBusy as error:
                failure = error
                time.sleep(BUSY_BACKOFF_S)
            except (AuxTimeout, WorkerLost) as error:
                failure = error
        assert failure is not None
        raise failure

    def submit(self, method: str, payload: dict[str, Any] | None = None) -> int:
        """Send without waiting; returns the request id for `result`."""
        rid = next(self._ids)
        deadline = time.time() + self.handle.timeout_s
        frames = encode_request(rid, self.rank, deadline, method, payload)
        send_message(self._sockets[self._picker.next()], frames)
        self._pending[rid] = (deadline, time.perf_counter())
        return rid

    def result(self, rid: int) -> dict[str, Any]:
        """Wait for the reply of `rid`; raises the typed error the reply carries."""
        deadline, sent = self._pending.pop(rid)
        while rid not in self._done:
            remaining = deadline - time.time()
            if remaining <= 0:
                self._abandoned.add(rid)
                raise AuxTimeout(f"{self.handle.service}: no reply in {self.handle.timeout_s}s")
            self._receive(remaining)
        head, *frames = self._done.pop(rid)
        _, status, wait_s, process_s, _ = REPLY.unpack_from(head)
        if self.report is not None and status in _SERVED:
            self._observe(time.perf_counter() - sent - wait_s - process_s)
        return self._unpack(status, head, frames)

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

    def _receive(self, timeout_s: float) -> None:
        for sock, _ in self._poller.poll(max(1, int(timeout_s * 1000))):
            for head, *frames in drain(sock, heads=1, ready=True):
                rid = request_id(head)
                if rid in self._abandoned:
                    self._abandoned.discard(rid)
                else:
                    self._done[rid] = [head, *frames]

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
        for sock in self._sockets:
            sock.close()
