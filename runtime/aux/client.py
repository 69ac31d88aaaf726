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
from runtime.aux.wire import Status, decode_body, decode_header, drain, encode
from runtime.fleet import ClientSample

BUSY_BACKOFF_S = 0.005
SAMPLE_CAP = 4096


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
    """Smooth weighted round-robin: picks in proportion to weight, interleaved."""

    def __init__(self, weights: Sequence[int]) -> None:
        if not weights or min(weights) < 1:
            raise ValueError(f"weights must be positive, got {list(weights)}")
        self.weights = list(weights)
        self._current = [0] * len(weights)

    def next(self) -> int:
        """Index of the next pick."""
        for index, weight in enumerate(self.weights):
            self._current[index] += weight
        best = max(range(len(self.weights)), key=self._current.__getitem__)
        self._current[best] -= sum(self.weights)
        return best


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
        context = zmq.Context.instance()
        self._sockets = [context.socket(zmq.DEALER) for _ in handle.endpoints]
        self._poller = zmq.Poller()
        for sock, endpoint in zip(self._sockets, handle.endpoints, strict=True):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint.address)
            self._poller.register(sock, zmq.POLLIN)
        self._picker = WeightedRoundRobin([e.weight for e in handle.endpoints])
        self._ids = itertools.count(1)
        self._deadlines: dict[int, tuple[float, float]] = {}  # id -> (deadline, sent at)
        self._done: dict[int, tuple[dict[str, Any], list[Any]]] = {}
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
        request_id = next(self._ids)
        deadline = time.time() + self.handle.timeout_s
        header = {"id": request_id, "rank": self.rank, "method": method, "deadline": deadline}
        sock = self._sockets[self._picker.next()]
        sock.send_multipart(encode(header, payload), copy=False)
        self._deadlines[request_id] = (deadline, time.perf_counter())
        return request_id

    def result(self, request_id: int) -> dict[str, Any]:
        """Wait for the reply of `request_id`; raises the typed error the reply carries."""
        deadline, sent = self._deadlines.pop(request_id)
        while request_id not in self._done:
            remaining = deadline - time.time()
            if remaining <= 0:
                self._abandoned.add(request_id)
                raise AuxTimeout(f"{self.handle.service}: no reply in {self.handle.timeout_s}s")
            self._receive(remaining)
        header, frames = self._done.pop(request_id)
        self._observe(header, time.perf_counter() - sent)
        return self._unpack(header, frames)

    def _observe(self, header: dict[str, Any], round_trip: float) -> None:
        """Transfer time = round trip - queue wait - processing; reported now and then."""
        if self.report is None or "process_s" not in header:
            return
        self._transfers.append(round_trip - header["wait_s"] - header["process_s"])
        if time.monotonic() >= self._next_report:
            self._next_report = time.monotonic() + self.report_interval_s
            sample = ClientSample(self.handle.service, self.rank, self._transfers[-SAMPLE_CAP:])
            self._transfers = []
            self.report(sample)

    def _receive(self, timeout_s: float) -> None:
        for sock, _ in self._poller.poll(max(1, int(timeout_s * 1000))):
            for head, *frames in drain(sock):
                header = decode_header(head)
                if header["id"] in self._abandoned:
                    self._abandoned.discard(header["id"])
                else:
                    self._done[header["id"]] = (header, frames)

    def _unpack(self, header: dict[str, Any], frames: list[Any]) -> dict[str, Any]:
        status, service = header.get("status"), self.handle.service
        if status == Status.OK:
            return decode_body(header, frames)
        if status == Status.ERROR:
            raise RemoteError(service, header.get("error_type", "Error"), header.get("error", ""))
        if status == Status.BUSY:
            raise AuxBusy(f"{service}: rank {self.rank}'s queue is full")
        if status == Status.LOST:
            raise WorkerLost(f"{service}: the worker died with the request in flight")
        raise AuxTimeout(f"{service}: deadline passed before the request was served")

    def close(self) -> None:
        """Close the sockets."""
        for sock in self._sockets:
            sock.close()
