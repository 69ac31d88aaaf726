"""The per-node proxy of one service: ZeroMQ TCP in front, IPC to the node's workers behind.

The data path is libzmq's own proxy device (`zmq_proxy_steerable`) between a ROUTER on TCP,
where training ranks connect, and a DEALER on IPC, where the node's workers connect. The
DEALER hands each request to the next worker in round-robin order (seed §5.2), passing over
a worker whose pipe is full, and the ROUTER routes each reply back by the identity frame
that the worker returns with it. No Python runs per message, and the device's thread does
not hold the GIL.

Beside it runs a control thread, a peer of the frontend ROUTER under the routing id
CONTROL_ID. Workers announce themselves (id, incarnation and its tag, requests queued)
through the device itself, addressed to that id like a reply to a client: an announcement
that arrives proves that the worker's link to the proxy is up, so a worker counts as ready
only once requests can reach it. When a worker id comes back with a new incarnation (Ray
restarted it), the requests it held are gone: the proxy publishes a loss notice, with the
tags of the incarnations now live, on a PUB socket that every client subscribes to, and
each client finds out which of its requests the lost one held and retries or fails those
by the service's policy (runtime.aux.client). Deadlines are kept at both ends (the worker
answers EXPIRED rather than serve late; the client raises AuxTimeout), and back-pressure by
the workers' bounded per-connection queues (BUSY). While no worker is connected the device
reads nothing from the ranks: requests wait in their sockets, bounded by their deadlines.

The TCP sockets listen on the pod's own IP (`GKR_POD_IP`, which the rendered pod sets from
the downward API's status.podIP), never on every interface, and on ports in PORTS, which the
job's NetworkPolicy admits from the job's own pods only. Without GKR_POD_IP (a local run)
they listen on loopback. The device forwards bytes unread; the worker checks them
(runtime.aux.wire).
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from runtime.aux.errors import WireError
from runtime.aux.wire import parse_json, tune
from runtime.fleet import ProxySample

log = logging.getLogger(__name__)

# The ports an auxiliary proxy listens on (requests and loss notices, two per service on a
# node), as libzmq's bind_to_random_port takes them: min inclusive, max exclusive.
PORTS = (47000, 48000)
POLL_MS = 50  # how often the control thread checks `stop`, the statistics and the report
CONTROL_ID = b"gkr-proxy-control"  # the control thread's routing id at the frontend
STATS_INTERVAL_S = 0.05
# zmq_proxy_steerable's STATISTICS reply: frames and bytes received and sent, frontend then
# backend (libzmq's zmq_proxy_steerable(3) manual), each as a native 64-bit integer.
_STATISTICS = struct.Struct("=Q")
STAT_NAMES = (
    "frontend_frames_in", "frontend_bytes_in", "frontend_frames_out", "frontend_bytes_out",
    "backend_frames_in", "backend_bytes_in", "backend_frames_out", "backend_bytes_out",
)


def _remove_ipc_file(address: str) -> None:
    """libzmq unlinks the file on its I/O thread, which may not run before the actor exits."""
    if address.startswith("ipc://"):
        Path(address.removeprefix("ipc://")).unlink(missing_ok=True)



def _bind(sock: zmq.Socket, host: str) -> str:
    port = sock.bind_to_random_port(f"tcp://{host}", min_port=PORTS[0], max_port=PORTS[1])
    return f"tcp://{host}:{port}"


_Announcement = tuple[str, str, int, int]  # worker, incarnation, tag, requests queued


def _announcement(text: bytes) -> _Announcement:
    """A worker's announcement (runtime.aux.worker), checked field by field."""
    message = parse_json(text)
    worker, incarnation = message.get("worker"), message.get("incarnation")
    tag, pending = message.get("tag"), message.get("pending", 0)
    if type(worker) is not str or type(incarnation) is not str:
        raise WireError("an announcement names its worker and incarnation as strings")
    if type(tag) is not int or not 0 <= tag < 1 << 64 or type(pending) is not int \
            or pending < 0:
        raise WireError("an announcement's tag is a 64-bit and its pending count a "
                        "non-negative int")
    return worker, incarnation, tag, pending


@dataclass(slots=True)
class _Known:
    incarnation: str
    tag: int  # the incarnation's tag in replies (runtime.aux.wire)
    pending: int


class ProxyCore:
    """The device and its control loop, independent of Ray so that tests can drive it."""

    def __init__(
        self,
        service: str,
        proxy_id: str,
        host: str,
        backend: str,
        report: Callable[[ProxySample], None] | None = None,
        report_interval_s: float = 1.0,
    ) -> None:
        self.service, self.proxy_id = service, proxy_id
        self.report, self.report_interval_s = report, report_interval_s
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.frontend = tune(context.socket(zmq.ROUTER))
        # The control peer takes its routing id before any TCP peer can connect: libzmq
        # refuses a later connection that asks for an id in use (ZMQ_ROUTER_HANDOVER off).
        self.announcements = self._control_peer(context)
        self.address = _bind(self.frontend, host)
        self.events = tune(context.socket(zmq.PUB))
        self.events_address = _bind(self.events, host)
        self.backend = tune(context.socket(zmq.DEALER))
        self.backend.bind(backend)
        self.backend_address = backend
        self._steer, self._device_control = self._steering(context)
        self.workers: dict[str, _Known] = {}
        self.malformed = 0  # announcements dropped because they could not be read
        self.stats = dict.fromkeys(STAT_NAMES, 0)
        self.stop = threading.Event()
        self._next_stats = self._next_report = 0.0

    def _control_peer(self, context: zmq.Context[Any]) -> zmq.Socket:
        """The control thread's DEALER, linked in-process to the frontend before any worker
        can connect, so that no announcement finds it missing."""
        name = f"inproc://gkr-proxy-control-{id(self):x}"
        self.frontend.bind(name)
        peer = tune(context.socket(zmq.DEALER))
        peer.setsockopt(zmq.ROUTING_ID, CONTROL_ID)
        peer.connect(name)
        return peer

    def _steering(self, context: zmq.Context[Any]) -> tuple[zmq.Socket, zmq.Socket]:
        """A PAIR for the control thread and its peer that the device listens on."""
        name = f"inproc://gkr-proxy-{id(self):x}"
        steer = context.socket(zmq.PAIR)
        steer.bind(name)
        device_end = context.socket(zmq.PAIR)
        device_end.connect(name)
        return steer, device_end

    @property
    def ready(self) -> list[str]:
        """Ids of the workers that have announced themselves."""
        return list(self.workers)

    def run(self) -> None:
        """Forward until `stop` is set, then stop the device and close every socket."""
        device = threading.Thread(
            target=zmq.proxy_steerable,
            args=(self.frontend, self.backend, None, self._device_control),
            name=f"proxy-device-{self.service}", daemon=True,
        )
        device.start()
        try:
            while not self.stop.is_set():
                if self.announcements.poll(POLL_MS):
                    self._take_announcements()
                self._housekeeping()
        finally:
            self._steer.send(b"TERMINATE")
            device.join()
            self._close()

    def _close(self) -> None:
        for sock in (self.frontend, self.backend, self.events, self.announcements,
                     self._steer, self._device_control):
            sock.close()
        _remove_ipc_file(self.backend_address)

    def _take_announcements(self) -> None:
        while self.announcements.poll(0):
            text = self.announcements.recv()
            try:
                self._announced(_announcement(text))
            except WireError as error:  # not from a worker of this layer
                self.malformed += 1
                log.warning("%s proxy: ignored an announcement it cannot read (%s): %.200r",
                            self.service, error, text)

    def _announced(self, message: _Announcement) -> None:
        """Remember the worker; a new incarnation of a known one means it died and
        restarted, so the requests it held are lost: tell the clients which incarnation
        was lost and which are live now."""
        worker, incarnation, tag, pending = message
        known = self.workers.get(worker)
        self.workers[worker] = _Known(incarnation, tag, pending)
        if known is not None and known.incarnation != incarnation:
            live = [entry.tag for entry in self.workers.values()]
            notice = {"worker": worker, "lost": known.tag, "live": live}
            self.events.send(json.dumps(notice).encode())

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if now >= self._next_stats:
            self._next_stats = now + STATS_INTERVAL_S
            self._steer.send(b"STATISTICS")
            frames = self._steer.recv_multipart()
            self.stats = {n: _STATISTICS.unpack(f)[0] for n, f in zip(STAT_NAMES, frames,
                                                                       strict=True)}
        if now >= self._next_report:
            self._next_report = now + self.report_interval_s
            if self.report is not None:
                self.report(self._sample())

    def _sample(self) -> ProxySample:
        """Requests held by the workers (their last announcements); none ever wait in the
        device while a worker is connected."""
        held = sum(known.pending for known in self.workers.values())
        return ProxySample(self.service, self.proxy_id, held, 0, len(self.workers))

    def start_thread(self) -> threading.Thread:
        """Run the control loop (which starts the device) on a daemon thread."""
        thread = threading.Thread(target=self.run, name=f"proxy-{self.service}", daemon=True)
        thread.start()
        return thread
