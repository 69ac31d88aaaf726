"""The training-rank side of the remote-call layer: ZeroMQ DEALERs to every proxy of a service.

Requests are spread over proxies by smooth weighted round-robin, each proxy weighted by its
worker count, with no spatial affinity (seed §5.2). Each request carries an id, the caller's
rank (for the workers' fair queues) and a deadline; replies are matched by id, so several
requests may be in flight. Deadlines are wall-clock times, which assumes the cluster's clocks
are synchronised (NTP), as they are on GKE nodes. A call runs in the caller's thread from end
to end (encode, send, one blocking receive in C, decode), with no thread hand-off of ours.

The client also applies the service's worker-loss policy, to exactly the requests that the
lost worker held. A proxy is a libzmq device that keeps no record of which worker it gave a
request, so when it announces that one of its workers restarted, the client takes a census
at that proxy: it probes until every live incarnation has answered a probe sent after the
requests in question, each answer listing the ids it holds (runtime.aux.worker). The links
keep order and a worker answers a probe only after the replies to what it served before, so
a request still pending that no live worker holds was with the lost one. Under `retry` the
client sends each such request again (at most MAX_ATTEMPTS times; the first reply wins, a
later duplicate is dropped), under `fail` each raises WorkerLost, which `call` retries like
a timeout. A live worker busy with a long request answers when it is done, so the census
may wait that long; a client that misses the notice (it connected after it) falls back on
the request's deadline.

Every reply and notice is checked by the wire decoder (runtime.aux.wire) before it is used.
One whose head cannot be read is dropped, logged with the proxy's address and counted
(`malformed`); a reply to a waiting request whose body the decoder refuses raises WireError
for that request. BUSY (the worker's queues for this connection, or its total, are full) is
retried after a growing back-off, and raised as AuxBusy once the retries are spent.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zmq

from runtime.aux.config import OnWorkerLoss
from runtime.aux.errors import (
    AuxBusy,
    AuxError,
    AuxTimeout,
    RemoteError,
    WireError,
    WorkerLost,
)
from runtime.aux.refresh import RefreshPoint
from runtime.aux.wire import (
    REPLY,
    Status,
    decode_body,
    drain,
    encode_probe,
    encode_reply,
    encode_request,
    parse_json,
    read_descriptor,
    read_head,
    recv_message,
    request_id,
    send_message,
    tune,
)
from runtime.fleet import ClientSample

log = logging.getLogger(__name__)

BUSY_BACKOFF_S, BUSY_BACKOFF_MAX_S = 0.005, 0.5  # doubled per BUSY answer of one call
SAMPLE_CAP = 4096
MAX_LIVE = 1 << 16  # incarnation tags in one loss notice
MAX_ATTEMPTS = 3  # a request lost with three workers is failed rather than sent again
STALE_BACKOFF_S, STALE_BACKOFF_MAX_S = 0.0005, 0.05
# A waiting client looks at the proxies' loss notices this often, and probes again the live
# workers that have not answered a census yet; a reply wakes it sooner.
NOTICE_CHECK_S = 0.1
_NOTICE_CHECK_MS = int(NOTICE_CHECK_S * 1000)
_SERVED = (Status.OK, Status.ERROR)  # replies that carry the worker's timings
_STATUSES = frozenset(value for name, value in vars(Status).items() if name.isupper())


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
    sent: float  # perf_counter at the first send, when transfer times are reported
    proxy: int  # index of the endpoint it went to; its reply comes back on that socket
    frames: list[Any]  # kept to send again after a worker loss or a STALE answer
    sequence: int  # number of its latest send among all of this client's sends
    attempts: int = 1  # sends after worker losses
    stale: int = 0  # STALE answers so far


@dataclass(slots=True)
class _Census:
    """Finding out, after a worker loss at one proxy, which pending requests the lost
    incarnation held (see the module's doc)."""

    before: int  # sends made when it began: requests last sent before then are in question
    live: frozenset[int]  # tags of the incarnations live at the proxy, from the notice
    held: dict[int, set[int]] = field(default_factory=dict)  # by tag that answered


@dataclass(frozen=True)
class ServiceHandle:
    """Everything a training rank needs to reach one service; small and picklable."""

    service: str
    endpoints: tuple[Endpoint, ...]
    timeout_s: float
    retries: int
    on_worker_loss: OnWorkerLoss = OnWorkerLoss.RETRY
    refresh: RefreshPoint | None = None  # where training publishes the workers' weights


def _live_tags(notice: list[Any]) -> list[int]:
    """The live incarnations' tags of a proxy's loss notice (runtime.aux.proxy)."""
    if len(notice) != 1:
        raise WireError(f"a loss notice is one frame, not {len(notice)}")
    live = parse_json(notice[0]).get("live")
    if not isinstance(live, list) or len(live) > MAX_LIVE or not all(
            type(tag) is int and 0 <= tag < 1 << 64 for tag in live):
        raise WireError(f"a loss notice's 'live' is a list of at most {MAX_LIVE} 64-bit tags")
    return live


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
            sock.rcvtimeo = _NOTICE_CHECK_MS
        self._waits = [_NOTICE_CHECK_MS] * len(self._sockets)  # each socket's RCVTIMEO now
        self._picker = WeightedRoundRobin([e.weight for e in handle.endpoints])
        self._ids = itertools.count(1)
        self._sends = 0
        self._pending: dict[int, _Pending] = {}
        self._done: dict[int, list[Any]] = {}  # id -> reply frames
        self._censuses: dict[int, _Census] = {}  # by proxy index
        self._probes: dict[int, tuple[int, _Census]] = {}  # probe id -> (proxy, census)
        self._next_check = 0.0
        self.malformed = 0  # replies and notices dropped because the decoder refused them

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
        for attempt in range(self.handle.retries + 1):
            try:
                return self.result(self.submit(method, payload, min_version))
            except AuxBusy as error:
                failure = error
                time.sleep(min(BUSY_BACKOFF_S * 2 ** attempt, BUSY_BACKOFF_MAX_S))
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
        sequence = self._send(proxy, frames)
        sent = time.perf_counter() if self.report is not None else 0.0
        self._pending[rid] = _Pending(deadline, sent, proxy, frames, sequence)
        return rid

    def _send(self, proxy: int, frames: list[Any]) -> int:
        """Send to a proxy; returns the number of this send."""
        send_message(self._sockets[proxy], frames)
        self._sends += 1
        return self._sends

    def result(self, rid: int) -> dict[str, Any]:
        """Wait for the reply of `rid`; raises the typed error the reply carries. A STALE
        answer sends the request again instead."""
        entry = self._pending[rid]
        while True:
            message = self._done.pop(rid, None) or self._receive(rid, entry)
            if message is None:
                continue
            _, status, wait_s, process_s, _, _ = self._reply_head(rid, message[0])
            if status != Status.STALE:
                break
            self._resend_later(entry)
        del self._pending[rid]
        if self.report is not None and status in _SERVED and entry.attempts == 1 \
                and not entry.stale:
            self._observe(time.perf_counter() - entry.sent - wait_s - process_s)
        return self._unpack(status, message)

    def _reply_head(self, rid: int, head: bytes) -> tuple[Any, ...]:
        """The prefix of the reply to `rid`, which must carry a status of this layer."""
        try:
            fields = read_head(head, REPLY)
            if fields[1] not in _STATUSES:
                raise WireError(f"unknown reply status {fields[1]}")
        except WireError as error:
            del self._pending[rid]
            self.malformed += 1
            raise WireError(f"{self.handle.service}: the reply from "
                            f"{self.handle.endpoints[self._proxy_of(rid)]} is malformed: "
                            f"{error}") from None
        return fields

    def _proxy_of(self, rid: int) -> int:
        entry = self._pending.get(rid)
        return entry.proxy if entry is not None else 0

    def _dropped(self, proxy: int, error: WireError) -> None:
        self.malformed += 1
        log.warning("%s: dropped a malformed message from %s (%d so far): %s",
                    self.handle.service, self.handle.endpoints[proxy].address, self.malformed,
                    error)

    def _resend_later(self, entry: _Pending) -> None:
        """The worker's weights were older than the request asked for: after a short wait
        (longer each time, up to STALE_BACKOFF_MAX_S), send it again; the proxy hands it to
        the next worker, and this one may have caught up meanwhile."""
        entry.stale += 1
        time.sleep(min(STALE_BACKOFF_S * 2 ** min(entry.stale, 8), STALE_BACKOFF_MAX_S))
        entry.sequence = self._send(entry.proxy, entry.frames)

    def _receive(self, rid: int, entry: _Pending) -> list[Any] | None:
        """Wait for the next message from the proxy of `rid`, up to the next notice check:
        the reply of `rid`, or None (another message is kept for its own caller). Raises
        AuxTimeout once the deadline has passed."""
        now = time.time()
        remaining = entry.deadline - now
        if remaining <= 0:
            del self._pending[rid]  # a late reply is dropped
            raise AuxTimeout(f"{self.handle.service}: no reply in {self.handle.timeout_s}s")
        if now >= self._next_check:
            self._check_notices()
        sock = self._sockets[entry.proxy]
        wait_ms = _NOTICE_CHECK_MS if remaining >= NOTICE_CHECK_S else int(remaining * 1000) + 1
        if self._waits[entry.proxy] != wait_ms:
            sock.rcvtimeo = self._waits[entry.proxy] = wait_ms
        try:
            message = recv_message(sock, heads=1, block=True)
            received = request_id(message[0])
        except zmq.Again:
            return None
        except WireError as error:
            self._dropped(entry.proxy, error)
            return None
        if received == rid:
            return message
        self._store(message)
        return None

    def _store(self, message: list[Any]) -> None:
        """Keep a reply whose request still waits; drop one for a request that timed out
        or was already answered (the duplicate of a request sent again). A probe's answer
        goes to its census."""
        rid = request_id(message[0])
        if rid in self._pending:
            if rid not in self._done:
                self._done[rid] = message
        elif rid in self._probes:
            try:
                self._counted(rid, message)
            except WireError as error:  # the census probes that worker again
                self._dropped(self._probes.get(rid, (0,))[0], error)

    def _check_notices(self) -> None:
        """Begin a census at each proxy that announced a loss; probe again the live
        workers that have not answered a census in progress (a probe may have reached a
        worker that had answered already: the proxy's round-robin is shared)."""
        self._next_check = time.time() + NOTICE_CHECK_S  # the deadlines' clock
        for proxy, census in self._censuses.items():
            self._probe(proxy, census, len(census.live.difference(census.held)))
        for proxy, sock in enumerate(self._notices):
            if sock is None:
                continue
            for notice in drain(sock, heads=1):
                try:
                    live = _live_tags(notice)
                except WireError as error:
                    self._dropped(proxy, error)
                    continue
                self._begin_census(proxy, live)

    def _begin_census(self, proxy: int, live: Iterable[int]) -> None:
        """(Re)start the census at `proxy`: every request sent there so far is in question."""
        census = _Census(self._sends, frozenset(live))
        self._censuses[proxy] = census
        self._probe(proxy, census, len(census.live))

    def _probe(self, proxy: int, census: _Census, count: int) -> None:
        for _ in range(count):
            rid = next(self._ids)
            self._probes[rid] = (proxy, census)
            self._send(proxy, encode_probe(rid, self.rank))

    def _counted(self, rid: int, message: list[Any]) -> None:
        """A live worker's answer to a probe; with the last one, the census concludes."""
        proxy, census = self._probes.pop(rid)
        head, *frames = message
        fields = read_head(head, REPLY)
        if self._censuses.get(proxy) is not census or fields[1] != Status.HELD:
            return  # a census that was restarted since the probe was sent
        body = decode_body(*read_descriptor(head, REPLY), head, frames)
        held = body.get("held")
        if not isinstance(held, np.ndarray) or held.ndim != 1 or held.dtype.kind != "u":
            raise WireError("a probe's answer holds its request ids as one uint64 array")
        census.held[fields[4]] = set(held.tolist())
        if census.live.issubset(census.held):
            del self._censuses[proxy]
            held = set().union(*census.held.values())
            self._worker_lost(proxy, census.before, held)

    def _worker_lost(self, proxy: int, before: int, held: set[int]) -> None:
        """Apply the loss policy to the requests sent to `proxy` before the census began
        that are neither answered nor held by a live worker: the lost one had them."""
        retry = self.handle.on_worker_loss is OnWorkerLoss.RETRY
        lost = [rid for rid, entry in self._pending.items() if entry.proxy == proxy
                and entry.sequence <= before and rid not in self._done and rid not in held]
        for rid in lost:
            entry = self._pending[rid]
            if retry and entry.attempts < MAX_ATTEMPTS:
                entry.attempts += 1
                entry.sequence = self._send(proxy, entry.frames)
            else:
                self._done[rid] = encode_reply(rid, Status.LOST)
        if lost:
            log.warning("%s: a worker behind %s was lost with %d request(s) of rank %d; %s",
                        self.handle.service, self.handle.endpoints[proxy].address, len(lost),
                        self.rank, "sent again" if retry else "failed")

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

    def _unpack(self, status: int, message: list[Any]) -> dict[str, Any]:
        service = self.handle.service
        head = message[0]
        if status == Status.OK:
            descriptor, offset = read_descriptor(head, REPLY)
            return decode_body(descriptor, offset, head, message[1:])
        if status == Status.ERROR:
            failure, _ = read_descriptor(head, REPLY)
            raise RemoteError(service, failure.get("error_type", "Error"), failure.get("error", ""))
        if status == Status.BUSY:
            raise AuxBusy(f"{service}: the worker's queues are full (BUSY): this connection's "
                          "share or the worker's total; retried with back-off, then raised")
        if status == Status.LOST:
            raise WorkerLost(f"{service}: the worker died with the request in flight")
        raise AuxTimeout(f"{service}: deadline passed before the request was served")

    def close(self) -> None:
        """Report the transfer times still held (short runs), then close the sockets."""
        self._flush_transfers()
        for sock in [*self._sockets, *self._notices]:
            if sock is not None:
                sock.close()
