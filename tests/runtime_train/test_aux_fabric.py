"""The proxy, the worker loop and the client over real ZeroMQ sockets (TCP and IPC), in
threads of this process; the Ray-hosted version is in test_aux_ray.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from runtime.aux.client import AuxClient, Endpoint, ServiceHandle
from runtime.aux.config import OnWorkerLoss
from runtime.aux.errors import AuxBusy, AuxTimeout, RemoteError, WorkerLost
from runtime.aux.services import EchoService
from runtime.fleet import ClientSample
from testing.wait import wait_until
from tests.runtime_train.fabric import Fabric


def test_call_returns_the_payload(fabric: Fabric) -> None:
    assert fabric.client(0).call("echo", {"n": 5})["n"] == 5


def test_service_errors_reach_the_caller_typed(fabric: Fabric) -> None:
    with pytest.raises(RemoteError, match="ValueError: boom") as caught:
        fabric.client(0).call("fail", {"message": "boom"})
    assert caught.value.remote_type == "ValueError"


class Unsendable(EchoService):
    """`opaque` returns a value the wire cannot carry (not JSON, not an array)."""

    def handle(self, method: str, payload: dict) -> dict:
        if method == "opaque":
            return {"handle": object()}
        return super().handle(method, payload)


def test_a_result_the_wire_cannot_carry_comes_back_as_an_error(tmp_path: Path) -> None:
    built = Fabric(tmp_path, OnWorkerLoss.RETRY, 64)
    try:
        built.add_worker("w0", Unsendable())
        with pytest.raises(RemoteError, match=r"TypeError: reply: .* not JSON serializable"):
            built.client(0).call("opaque", {})
        assert built.client(1).call("where", {})  # the worker survived and still serves
    finally:
        built.close()


def test_deadline_expires_instead_of_waiting_forever(fabric: Fabric) -> None:
    with pytest.raises(AuxTimeout):
        fabric.client(0, timeout_s=0.2).call("sleep", {"seconds": 1.0})


class Gate(EchoService):
    """`hold` keeps the worker busy until the test opens the gate."""

    def __init__(self) -> None:
        self.entered, self.opened = threading.Event(), threading.Event()

    def handle(self, method: str, payload: dict) -> dict:
        if method == "hold":
            self.entered.set()
            self.opened.wait(10)
        return super().handle("echo", payload)


def test_full_rank_queue_answers_busy(tmp_path: Path) -> None:
    built, gate = Fabric(tmp_path, OnWorkerLoss.RETRY, queue_size=1), Gate()
    try:
        built.add_worker("w0", gate)
        client = built.client(0)
        blocker = client.submit("hold", {})
        assert gate.entered.wait(10)
        queued = [client.submit("echo", {"i": i}) for i in range(3)]
        # all four passed the device (client identity + head: two frames each)
        wait_until(lambda: built.proxy.stats["backend_frames_out"] >= 8, 30,
                   "the four requests to pass the proxy")
        time.sleep(0.2)
        gate.opened.set()
        client.result(blocker)
        outcomes = []
        for request in queued:
            try:
                outcomes.append(client.result(request)["i"])
            except AuxBusy:
                outcomes.append("busy")
        assert outcomes == [0, "busy", "busy"]  # the rank's queue of one takes the first
    finally:
        built.close()


class Recorder(EchoService):
    """Remembers the order in which requests were served."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def handle(self, method: str, payload: dict) -> dict:
        self.order.append(payload["tag"])
        return super().handle(method, payload)


def test_a_flooding_rank_does_not_starve_another(tmp_path: Path) -> None:
    built, recorder = Fabric(tmp_path, OnWorkerLoss.RETRY, 64), Recorder()
    try:
        built.add_worker("w0", recorder)
        flood, quiet = built.client(0, timeout_s=30), built.client(1)
        flooded = [flood.submit("sleep", {"seconds": 0.02, "tag": f"f{i}"}) for i in range(40)]
        # the flood is on its way to the worker (identity + head: two frames each)
        wait_until(lambda: built.proxy.stats["backend_frames_out"] >= 2 * len(flooded), 30,
                   "the flood to pass the proxy")
        quiet.call("echo", {"tag": "q"})
        for request in flooded:
            flood.result(request)
        # FIFO admission would serve the quiet rank last; round-robin serves it next.
        assert recorder.order.index("q") < len(recorder.order) - 10
    finally:
        built.close()


class CrashOnce(EchoService):
    """Kills its worker thread the first time `crash` is called, as a process crash would:
    SystemExit escapes the serving loop, whose socket closes with the request unanswered."""

    crashed = False

    def handle(self, method: str, payload: dict) -> dict:
        if method == "crash" and not CrashOnce.crashed:
            CrashOnce.crashed = True
            raise SystemExit
        return {"served": method}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("policy", [OnWorkerLoss.RETRY, OnWorkerLoss.FAIL])
def test_restarted_worker_triggers_the_loss_policy(tmp_path: Path, policy: OnWorkerLoss) -> None:
    built = Fabric(tmp_path, policy, 64)
    CrashOnce.crashed = False
    try:
        built.add_worker("w0", CrashOnce())
        client = built.client(0)
        request = client.submit("crash", {})
        built.threads[-1].join(timeout=30)  # the worker died with the request in flight
        assert not built.threads[-1].is_alive()
        built.add_worker("w0", CrashOnce())  # Ray restarts it: same id, new incarnation
        if policy is OnWorkerLoss.FAIL:
            with pytest.raises(WorkerLost):
                client.result(request)
        else:
            assert client.result(request) == {"served": "crash"}
    finally:
        built.close()


class CrashOrHold(EchoService):
    """`crash` kills the worker that serves it the first time, as CrashOnce does; `hold`
    keeps its worker busy until the test opens the gate."""

    crashed = False

    def __init__(self, gate: threading.Event) -> None:
        self.gate = gate

    def handle(self, method: str, payload: dict) -> dict:
        if method == "crash" and not CrashOrHold.crashed:
            CrashOrHold.crashed = True
            raise SystemExit
        if method == "hold":
            self.gate.wait(30)
        return {"served": method}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_loss_fails_only_the_requests_that_worker_held(tmp_path: Path) -> None:
    """Two workers behind one proxy, which deals requests to them in turn: X serves `hold`
    with `echo` queued behind it, Y serves `echo` then dies serving `crash`. The loss policy
    (here: fail) meets only `crash`; what X held, in service and queued, is answered."""
    built, gate = Fabric(tmp_path, OnWorkerLoss.FAIL, 64), threading.Event()
    CrashOrHold.crashed = False
    try:
        for worker_id in ("w0", "w1"):
            built.add_worker(worker_id, CrashOrHold(gate))
        client = built.client(0)
        hold, first, queued, crash = (client.submit(method, {}) for method in
                                      ("hold", "echo", "echo", "crash"))  # X, Y, X, Y
        workers = built.threads[1:]
        wait_until(lambda: not all(t.is_alive() for t in workers), 30, "a worker to die")
        lost = built.workers[[t.is_alive() for t in workers].index(False)]
        built.add_worker(lost.worker_id, CrashOrHold(gate))  # restarted: a new incarnation
        outcome: list[Any] = []
        waiting = threading.Thread(target=lambda: outcome.append(_outcome(client, crash)))
        waiting.start()
        # The client probes both live workers (each probe: identity and head frames, after
        # the 4 x 2 of the requests); X can answer only once `hold` is done.
        wait_until(lambda: built.proxy.stats["frontend_frames_in"] > 8 or not waiting.is_alive(),
                   30, "the client to probe the live workers")
        gate.set()
        waiting.join(30)
        assert isinstance(outcome[0], WorkerLost)
        assert [client.result(rid) for rid in (hold, first, queued)] == [
            {"served": "hold"}, {"served": "echo"}, {"served": "echo"}]
    finally:
        gate.set()
        built.close()


def _outcome(client: AuxClient, rid: int) -> Any:
    try:
        return client.result(rid)
    except WorkerLost as error:
        return error


def test_client_reports_transfer_time_net_of_wait_and_processing(fabric: Fabric) -> None:
    reports: list[ClientSample] = []
    handle = ServiceHandle("echo", (Endpoint(fabric.proxy.address, 1),), 5.0, 0)
    client = AuxClient(handle, rank=2, report=reports.append, report_interval_s=0.0)
    client.call("sleep", {"seconds": 0.2})
    (sample,) = reports
    assert (sample.service, sample.rank) == ("echo", 2)
    assert 0 <= sample.transfer_s[0] < 0.2  # the 0.2 s of processing is not transfer
