"""The reported attacks on the remote-call layer, one test each, over real ZeroMQ sockets: an
object-dtype inline array (SIGSEGV), fairness that trusted a claimed rank, no total bound
per worker, a serving thread that died while its worker said healthy, and proxies that must
listen on the pod's IP only."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from runtime.aux.client import AuxClient, Endpoint, ServiceHandle
from runtime.aux.config import OnWorkerLoss
from runtime.aux.errors import AuxBusy, WireError
from runtime.aux.proxy import PORTS, ProxyCore
from runtime.aux.services import EchoService
from runtime.aux.wire import (
    REPLY,
    REQUEST,
    Status,
    encode_reply,
    encode_request,
    read_descriptor,
    recv_message,
    request_id,
    send_message,
)
from runtime.aux.worker import WorkerCore
from runtime.identity import LOCAL_HOST, Env, listen_host
from tests.runtime_train.fabric import Fabric
from tests.runtime_train.test_aux_fuzz import Target

WAIT_S = 60.0


def _object_dtype_request() -> bytes:
    """The ~100-byte message of the report: an inline array whose dtype is `object`, so that
    received bytes (0x41...) would be used as PyObject pointers."""
    text = json.dumps({"method": "echo", "arrays": [["x", "|O", [4], False, True]]}).encode()
    return REQUEST.pack(1, 0, 0, 0.0, len(text)) + text + b"\x41" * 32


def test_an_object_dtype_inline_array_is_refused_before_it_is_mapped() -> None:
    head = _object_dtype_request()
    assert len(head) < 140
    target = Target("decode")  # a crash there fails this test instead of ending pytest
    try:
        outcomes = target.send([head])
        text_length = REQUEST.unpack_from(head)[-1]
        reply_head = REPLY.pack(1, Status.OK, 0.0, 0.0, 0, text_length) + head[REQUEST.size:]
        reply_outcomes = target.send([reply_head])
    finally:
        target.process.stdin.close()  # type: ignore[union-attr]
        assert target.process.wait(WAIT_S) == 0
    assert outcomes[:3] == ["WireError"] * 3, outcomes
    assert reply_outcomes[1] == "WireError" and reply_outcomes[3] == "WireError"


class Gate(EchoService):
    """Holds the worker in its first `hold` until opened, so requests queue behind it."""

    def __init__(self) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()

    def handle(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        if method == "hold":
            self.entered.set()
            self.opened.wait(WAIT_S)
        return super().handle("echo", payload)


def _dealer(address: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.rcvtimeo = int(WAIT_S * 1000)
    sock.connect(address)
    return sock


def _statuses(sock: zmq.Socket, count: int) -> dict[int, int]:
    """Request id -> reply status, for the next `count` replies on `sock`."""
    replies = {}
    for _ in range(count):
        head = recv_message(sock, heads=1, block=True)[0]
        rid, status = REPLY.unpack_from(head)[:2]
        replies[rid] = status
    return replies


def _held(tmp_path: Path, queue_size: int, queue_total: int | None = None
          ) -> tuple[Fabric, Gate, Any]:
    """A fabric whose one worker is held in a request of a client of its own."""
    built, gate = Fabric(tmp_path, OnWorkerLoss.RETRY, queue_size), Gate()
    core = WorkerCore("echo", "w0", built.backend, gate, queue_size, queue_total=queue_total)
    built.threads.append(core.start_thread())
    built.workers.append(core)
    deadline = time.monotonic() + WAIT_S
    while "w0" not in built.proxy.workers and time.monotonic() < deadline:
        time.sleep(0.01)
    holder = built.client(99)
    blocker = holder.submit("hold", {})
    assert gate.entered.wait(WAIT_S)
    return built, gate, (holder, blocker)


def _queued(built: Fabric, requests: int) -> None:
    """Wait until the device has passed `requests` more requests (identity + head each)
    to the worker, and the worker has taken them in (it does between two requests, so
    after the gate opens; the hold keeps them waiting in its socket until then)."""
    target = built.proxy.stats["backend_frames_out"] + 2 * requests
    deadline = time.monotonic() + WAIT_S
    while built.proxy.stats["backend_frames_out"] < target and time.monotonic() < deadline:
        time.sleep(0.01)


def test_one_connection_claiming_many_ranks_gets_one_share(tmp_path: Path) -> None:
    """Before, the queues were keyed on the rank a request claims: one peer naming ten ranks
    had ten queues' room. Now its connection has one queue of `queue_size`."""
    built, gate, (holder, blocker) = _held(tmp_path, queue_size=2)
    flood = _dealer(built.proxy.address)
    quiet = built.client(1)
    try:
        for rank in range(10):
            flood.send_multipart(encode_request(rank + 1, rank, 0.0, "echo", {}))
        _queued(built, 10)
        asked = quiet.submit("echo", {"q": 1})
        _queued(built, 1)
        gate.opened.set()
        holder.result(blocker)
        statuses = _statuses(flood, 10)
        assert quiet.result(asked)["q"] == 1  # a connection of its own: admitted
    finally:
        gate.opened.set()
        flood.close()
        built.close()
    assert sorted(statuses.values()) == [Status.OK] * 2 + [Status.BUSY] * 8


def test_a_worker_holds_at_most_its_total_and_answers_busy(tmp_path: Path) -> None:
    built, gate, (holder, blocker) = _held(tmp_path, queue_size=10, queue_total=3)
    peers = [_dealer(built.proxy.address) for _ in range(5)]
    try:
        for rid, peer in enumerate(peers, 1):
            peer.send_multipart(encode_request(rid, 0, 0.0, "echo", {}))
        _queued(built, 5)
        gate.opened.set()
        holder.result(blocker)
        statuses = [status for peer in peers for status in _statuses(peer, 1).values()]
    finally:
        gate.opened.set()
        for peer in peers:
            peer.close()
        built.close()
    assert sorted(statuses) == [Status.OK] * 3 + [Status.BUSY] * 2


def test_the_client_retries_busy_then_raises_it_clearly() -> None:
    """A peer that answers every request BUSY (a ROUTER on a real socket, as a full worker
    behind its proxy does): `call` sends again with back-off, then raises AuxBusy."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    handle = ServiceHandle("echo", (Endpoint(f"tcp://127.0.0.1:{port}", 1),), WAIT_S, 2)
    client = AuxClient(handle, rank=0)
    seen: list[int] = []

    def busy() -> None:
        for _ in range(3):
            peer, head = recv_message(router, heads=2, block=True)[:2]
            seen.append(request_id(head))
            send_message(router, [peer, *encode_reply(request_id(head), Status.BUSY)])

    router.rcvtimeo = int(WAIT_S * 1000)
    answering = threading.Thread(target=busy, daemon=True)
    answering.start()
    try:
        with pytest.raises(AuxBusy, match=r"queues are full \(BUSY\)"):
            client.call("echo", {})
        answering.join(WAIT_S)
    finally:
        client.close()
        router.close()
    assert len(seen) == 3 == len(set(seen))  # the first try and two retries


class Dies(EchoService):
    """Ends the serving thread on `die`, as an error no service handler catches would."""

    def handle(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        if method == "die":
            raise SystemExit(3)
        return super().handle(method, payload)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_whose_thread_died_reports_unhealthy_and_asks_to_be_replaced(
    tmp_path: Path,
) -> None:
    built = Fabric(tmp_path, OnWorkerLoss.FAIL, 4)
    deaths: list[BaseException] = []
    core = WorkerCore("echo", "w0", built.backend, Dies(), 4, on_death=deaths.append)
    thread = core.start_thread()
    built.threads.append(thread)
    client = built.client(0, timeout_s=WAIT_S)
    try:
        assert client.call("echo", {"a": 1})["a"] == 1 and core.healthy
        client.submit("die", {})
        thread.join(WAIT_S)
    finally:
        client.close()
        built.close()
    assert not thread.is_alive() and not core.healthy
    assert isinstance(core.failure, SystemExit) and deaths == [core.failure]


def test_proxies_listen_on_the_pods_ip_in_the_policys_ports(tmp_path: Path) -> None:
    assert listen_host({Env.POD_IP: "10.4.0.17"}) == "10.4.0.17"
    assert listen_host({}) == LOCAL_HOST == "127.0.0.1"
    proxy = ProxyCore("echo", "p", listen_host({}), f"ipc://{tmp_path}/p.sock")
    try:
        for address in (proxy.address, proxy.events_address):
            host, port = address.removeprefix("tcp://").rsplit(":", 1)
            assert host == "127.0.0.1" and PORTS[0] <= int(port) < PORTS[1]
    finally:
        proxy._close()


def test_a_descriptor_valid_as_a_reply_is_still_checked_as_a_request() -> None:
    """Found by the fuzzer: the descriptor cache was keyed by text alone, so a text that a
    reply may carry, seen once as one, was then taken for a request without its method."""
    text = b'{"arrays":[]}'
    reply = REPLY.pack(1, Status.OK, 0.0, 0.0, 0, len(text)) + text
    request = REQUEST.pack(1, 0, 0, 0.0, len(text)) + text
    assert read_descriptor(reply, REPLY)[0] == {"arrays": []}
    with pytest.raises(WireError, match="names no method"):
        read_descriptor(request, REQUEST)
