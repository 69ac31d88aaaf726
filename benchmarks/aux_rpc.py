"""Auxiliary-service RPC: the ZeroMQ path (client -> proxy -> worker over IPC) against the same
service reached by Ray actor calls (`ray.get(actor.handle.remote(...))`), in one run.

Prints requests per second and p50/p99 latency for 1 KiB, 64 KiB and 1 MiB payloads, one
request at a time and with a window of 16 in flight, then a fairness measurement: the latency
of a quiet rank while another rank floods the service, on both paths.

    .venv/bin/python benchmarks/aux_rpc.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from runtime.aux.client import AuxClient, ServiceHandle
from runtime.aux.config import AuxConfig, ServiceConfig
from runtime.aux.coordinator import AuxCoordinator
from runtime.aux.services import EchoService
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


def main() -> None:
    """Run every measurement once and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer calls (a smoke run).")
    quick = parser.parse_args().quick
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
