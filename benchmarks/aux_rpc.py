"""Auxiliary-service RPC: the ZeroMQ path (client -> proxy -> worker over IPC) against the same
service reached by Ray actor calls (`ray.get(actor.handle.remote(...))`), in one run.

Prints requests per second and p50/p99 latency for 1 KiB, 64 KiB and 1 MiB payloads, one
request at a time and with a window of 16 in flight, then a fairness measurement: the latency
of a quiet rank while another rank floods the service, on both paths. The ZeroMQ side runs
as in production: AuxCoordinator starts the proxy and the worker as Ray actors, each in its
own process; the Ray side is a plain actor whose method calls the same EchoService.

With --hops it instead shows where one 1 KiB round trip of the ZeroMQ path spends its time:
the same proxy and worker code runs in plain processes (no Ray), each timing its
`send_message` and `recv_message` calls on one shared monotonic clock.

    .venv/bin/python benchmarks/aux_rpc.py [--quick] [--hops]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray

import runtime.aux.client as client_module
import runtime.aux.proxy as proxy_module
import runtime.aux.wire as wire
import runtime.aux.worker as worker_module
from runtime.aux.client import AuxClient, Endpoint, ServiceHandle
from runtime.aux.config import AuxConfig, OnWorkerLoss, ServiceConfig
from runtime.aux.coordinator import AuxCoordinator
from runtime.aux.proxy import ProxyCore
from runtime.aux.services import EchoService
from runtime.aux.worker import WorkerCore
from runtime.planner import NodeCapacity, PlanInput, ServiceDemand, WorkerRequest, plan_capacity

SIZES = {"1 KiB": 1 << 10, "64 KiB": 64 << 10, "1 MiB": 1 << 20}
CALLS = {"1 KiB": 3000, "64 KiB": 1500, "1 MiB": 300}
WINDOW = 16


@dataclass
class Figures:
    """Throughput and latency of one path at one payload size."""

    rps: float
    p50_ms: float
    p99_ms: float


class RayEcho:
    """The same EchoService behind a plain Ray actor: what a user would otherwise write."""

    def __init__(self) -> None:
        self.service = EchoService()

    def handle(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self.service.handle(method, payload)


def _sequential(call: Callable[[], Any], count: int) -> Figures:
    for _ in range(min(200, count)):
        call()
    latencies = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - started
    p50, p99 = np.percentile(latencies, [50, 99]) * 1e3
    return Figures(count / elapsed, float(p50), float(p99))


def _windowed(submit: Callable[[], Any], wait: Callable[[Any], Any], count: int) -> float:
    started = time.perf_counter()
    in_flight = [submit() for _ in range(WINDOW)]
    for _ in range(count - WINDOW):
        wait(in_flight.pop(0))
        in_flight.append(submit())
    for ref in in_flight:
        wait(ref)
    return count / (time.perf_counter() - started)


def _start_zmq_service() -> tuple[AuxCoordinator, ServiceHandle]:
    echo = ServiceConfig(impl="echo", cpus_per_worker=1, min_replicas=1, queue_size=256,
                         request_timeout_s=30, retries=0)
    plan = plan_capacity(PlanInput(
        (NodeCapacity(0, 4),), WorkerRequest(0, 1),
        (ServiceDemand("echo", WorkerRequest(0, 1), ratio=16),), max_world_size=1,
    ))
    coordinator = AuxCoordinator("bench", AuxConfig(services={"echo": echo}), plan)
    return coordinator, coordinator.start()["echo"]


def _compare_sizes(handle: ServiceHandle, actor: Any, quick: bool) -> None:
    client = AuxClient(handle, rank=0)
    print(f"{'payload':>8} {'path':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'req/s w=16':>11}")
    for label, size in SIZES.items():
        payload = {"x": np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)}
        count = CALLS[label] // (5 if quick else 1)
        zmq_fig = _sequential(lambda p=payload: client.call("echo", p), count)
        zmq_win = _windowed(lambda p=payload: client.submit("echo", p), client.result, count)
        ray_fig = _sequential(lambda p=payload: ray.get(actor.handle.remote("echo", p)), count)
        ray_win = _windowed(lambda p=payload: actor.handle.remote("echo", p), ray.get, count)
        for name, fig, win in (("zmq", zmq_fig, zmq_win), ("ray", ray_fig, ray_win)):
            print(f"{label:>8} {name:>5} {fig.rps:>9.0f} {fig.p50_ms:>8.3f} {fig.p99_ms:>8.3f} "
                  f"{win:>11.0f}")
        print(f"{label:>8} ratio zmq/ray: {zmq_fig.rps / ray_fig.rps:.1f}x sequential, "
              f"{zmq_win / ray_win:.1f}x windowed")
    client.close()


def _quiet_latency(call: Callable[[], Any], count: int) -> float:
    latencies = []
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - t0)
        time.sleep(0.002)
    return float(np.percentile(latencies, 99)) * 1e3


def _flood(submit: Callable[[], Any], wait: Callable[[Any], Any], stop: threading.Event) -> None:
    in_flight = [submit() for _ in range(64)]
    while not stop.is_set():
        wait(in_flight.pop(0))
        in_flight.append(submit())
    for ref in in_flight:
        wait(ref)


def _fairness(handle: ServiceHandle, actor: Any, quick: bool) -> None:
    """Rank 1's p99 alone, then while rank 0 keeps 64 requests of 0.5 ms of work in flight."""
    count = 60 if quick else 200
    work = {"seconds": 0.0005}
    flooder, quiet = AuxClient(handle, rank=0), AuxClient(handle, rank=1)
    paths = {
        "zmq": (lambda: quiet.call("echo", {}), lambda: flooder.submit("sleep", work),
                flooder.result),
        "ray": (lambda: ray.get(actor.handle.remote("echo", {})),
                lambda: actor.handle.remote("sleep", work), ray.get),
    }
    print("\nfairness: quiet rank's p99 latency (ms), alone and beside a flooding rank")
    for name, (call, submit, wait) in paths.items():
        alone = _quiet_latency(call, count)
        stop = threading.Event()
        thread = threading.Thread(target=_flood, args=(submit, wait, stop), daemon=True)
        thread.start()
        time.sleep(0.2)
        flooded = _quiet_latency(call, count)
        stop.set()
        thread.join()
        print(f"{name:>5}: alone {alone:.3f}  flooded {flooded:.3f}  ({flooded / alone:.1f}x)")
    flooder.close()
    quiet.close()


HOP_CALLS = 3000
HOPS = (  # (label, process of the start event, its index, process of the end event, index)
    ("client: encode, pick a proxy", "call", 0, "client", 0),
    ("client: send_message", "client", 0, "client", 1),
    ("TCP client -> proxy, proxy wakes", "client", 1, "proxy_in", 0),
    ("proxy: route on the prefix", "proxy_in", 0, "proxy_in", 1),
    ("proxy: send_message to worker", "proxy_in", 1, "proxy_in", 2),
    ("IPC proxy -> worker, worker wakes", "proxy_in", 2, "worker", 0),
    ("worker: queue, decode, handle, encode", "worker", 0, "worker", 1),
    ("worker: send_message", "worker", 1, "worker", 2),
    ("IPC worker -> proxy, proxy wakes", "worker", 2, "proxy_out", 0),
    ("proxy: match the reply", "proxy_out", 0, "proxy_out", 1),
    ("proxy: send_message to client", "proxy_out", 1, "proxy_out", 2),
    ("TCP proxy -> client, client wakes", "proxy_out", 2, "client", 2),
    ("client: decode the reply", "client", 2, "call", 1),
)


def _timed_wire(log: list[float]) -> None:
    """Log the clock before and after each send and after each receive in this process;
    the heartbeats (control messages) are left out."""
    send, recv = wire.send_message, wire.recv_message

    def timed_send(sock: Any, frames: Any) -> None:
        log.append(time.perf_counter())
        send(sock, frames)
        log.append(time.perf_counter())

    def timed_recv(sock: Any, heads: int) -> list[Any]:
        parts = recv(sock, heads)
        if not (heads == 3 and parts[1] == wire.CONTROL):
            log.append(time.perf_counter())
        return parts

    for module in (wire, client_module, proxy_module, worker_module):
        module.recv_message, module.send_message = timed_recv, timed_send


def _serve_timed(core: Any, out: Path) -> None:
    log: list[float] = []
    _timed_wire(log)
    signal.signal(signal.SIGTERM, lambda *_: core.stop.set())
    core.run()
    np.save(out, np.array(log))


def _hop_proxy(backend: str, address: Any, out: Path) -> None:
    core = ProxyCore("echo", "p", "127.0.0.1", backend, OnWorkerLoss.RETRY)
    address.put(core.address)
    _serve_timed(core, out)


def _hop_worker(backend: str, out: Path) -> None:
    _serve_timed(WorkerCore("echo", "w0", backend, EchoService(), 256), out)


def _hop_client(address: str, calls: int) -> tuple[np.ndarray, np.ndarray]:
    """Clock stamps of `calls` sequential 1 KiB calls: around each call, and client-side."""
    client = AuxClient(ServiceHandle("echo", (Endpoint(address, 1),), 30, 0), rank=0)
    payload = {"x": np.random.default_rng(0).integers(0, 255, SIZES["1 KiB"], dtype=np.uint8)}
    for _ in range(300):
        client.call("echo", payload)
    log: list[float] = []
    _timed_wire(log)
    around = np.empty((calls, 2))
    for index in range(calls):
        around[index, 0] = time.perf_counter()
        client.call("echo", payload)
        around[index, 1] = time.perf_counter()
    client.close()
    return around, np.array(log).reshape(calls, 3)


def _hop_stamps(folder: Path, calls: int) -> dict[str, np.ndarray]:
    """Run proxy and worker in forked processes and the client here; every process's stamps."""
    forks = multiprocessing.get_context("fork")
    backend, address = f"ipc://{folder}/hops.sock", forks.Queue()
    proxy = forks.Process(target=_hop_proxy, args=(backend, address, folder / "proxy.npy"))
    proxy.start()
    worker = forks.Process(target=_hop_worker, args=(backend, folder / "worker.npy"))
    worker.start()
    time.sleep(1.0)  # the worker announces itself
    around, client = _hop_client(address.get(timeout=10), calls)
    for process in (proxy, worker):
        process.terminate()
        process.join()
    proxy_log = np.load(folder / "proxy.npy")[-6 * calls:].reshape(calls, 2, 3)
    return {"call": around, "client": client, "proxy_in": proxy_log[:, 0],
            "proxy_out": proxy_log[:, 1],
            "worker": np.load(folder / "worker.npy")[-3 * calls:].reshape(calls, 3)}


def _hops(quick: bool) -> None:
    calls = HOP_CALLS // (5 if quick else 1)
    with tempfile.TemporaryDirectory() as folder:
        stamps = _hop_stamps(Path(folder), calls)
    print(f"one 1 KiB call, {calls} in sequence, no Ray: time per hop (us)")
    print(f"{'hop':>40} {'p50':>7} {'mean':>7}")
    total = 0.0
    for label, start, first, end, second in HOPS:
        spent = (stamps[end][:, second] - stamps[start][:, first]) * 1e6
        total += float(np.mean(spent))
        print(f"{label:>40} {np.percentile(spent, 50):>7.1f} {np.mean(spent):>7.1f}")
    trip = (stamps["call"][:, 1] - stamps["call"][:, 0]) * 1e6
    print(f"{'round trip':>40} {np.percentile(trip, 50):>7.1f} {np.mean(trip):>7.1f}"
          f"   (hops add up to {total:.1f} mean)")


def main() -> None:
    """Run every measurement once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer calls (a smoke run).")
    parser.add_argument("--hops", action="store_true", help="Time per hop instead (no Ray).")
    args = parser.parse_args()
    if args.hops:
        _hops(args.quick)
        return
    quick = args.quick
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (other work shares them)")
    ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING")
    coordinator, handle = _start_zmq_service()
    actor = ray.remote(num_cpus=1)(RayEcho).remote()
    ray.get(actor.handle.remote("echo", {}))
    try:
        _compare_sizes(handle, actor, quick)
        _fairness(handle, actor, quick)
    finally:
        coordinator.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
