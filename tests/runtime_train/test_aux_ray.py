"""Auxiliary services on a real local Ray: placement, proxies, FleetMonitor, and a worker
killed mid-stream."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
import ray

from runtime.aux.client import AuxClient
from runtime.aux.config import AuxConfig, ServiceConfig
from runtime.aux.coordinator import AuxCoordinator
from runtime.aux.errors import AuxStartupError
from runtime.aux.refresh import WeightPublisher
from runtime.fleet import FleetReporter, ServiceSummary, WorkerSample, start_monitor
from runtime.planner import NodeCapacity, PlanInput, ServiceDemand, WorkerRequest, plan_capacity
from testing.wait import wait_until
from tests.runtime_train.versioned import consistent, weights

pytestmark = pytest.mark.slow


def _coordinator(run_id: str, services: dict[str, ServiceConfig]) -> AuxCoordinator:
    config = AuxConfig(services=services, report_interval_s=0.2)
    demands = tuple(
        ServiceDemand(n, WorkerRequest(0, s.cpus_per_worker), s.ratio, s.min_replicas)
        for n, s in services.items()
    )
    nodes = (NodeCapacity(0, 4),)
    plan = plan_capacity(PlanInput(nodes, WorkerRequest(0, 1), demands, max_world_size=1))
    return AuxCoordinator(run_id, config, plan)


def test_killed_worker_restarts_and_requests_in_flight_are_retried(local_ray: None) -> None:
    # A generous deadline: a restart under CPU load (CI beside other work) can take many
    # seconds, and this test is about every request being answered, not about latency.
    echo = ServiceConfig(impl="echo", cpus_per_worker=0.5, min_replicas=2, request_timeout_s=120,
                         retries=0, max_restarts=2)
    monitor = start_monitor("killtest", stale_after_s=30)
    coordinator = _coordinator("killtest", {"echo": echo})
    try:
        handle = coordinator.start()["echo"]
        assert handle.endpoints[0].weight == 2
        client = AuxClient(handle, rank=0)
        pending = [client.submit("sleep", {"seconds": 0.05, "i": i}) for i in range(40)]
        first = client.result(pending[0])["i"]  # serving has begun: the kill is mid-stream
        ray.kill(coordinator.actors["echo"][0], no_restart=False)
        results = [first, *(client.result(request)["i"] for request in pending[1:])]
        assert results == list(range(40))  # every request answered despite the kill
        assert client.call("echo", {"after": True})["after"] is True

        def restarted() -> Any:
            summary = ray.get(monitor.summaries.remote())["echo"]
            return summary if summary.restarts >= 1 and summary.workers_known == 2 else None

        summary = wait_until(restarted, 60, "the FleetMonitor to count the restart")
        assert summary.process_ms_p50 > 0
    finally:
        coordinator.shutdown()
        ray.kill(monitor)


def test_refreshes_reach_every_worker_and_a_killed_one_returns_current(
    local_ray: None,
) -> None:
    """Two workers serve while training publishes; one is killed and Ray restarts it. Every
    reply carries one whole version, none older than what was published before the kill,
    and the restarted process serves too (it got the newest version first)."""
    versioned = ServiceConfig(impl="tests.runtime_train.versioned:Versioned",
                              cpus_per_worker=0.5, min_replicas=2, refresh=True,
                              request_timeout_s=120, retries=0, max_restarts=2)
    coordinator = _coordinator("refreshtest", {"versioned": versioned})
    try:
        handle = coordinator.start()["versioned"]
        assert handle.refresh is not None and handle.refresh.backend == "gloo"
        publisher = WeightPublisher(handle.refresh)
        wait_until(lambda: len(publisher.workers) >= 2, 120,
                   "both workers to join the refresh group")
        for version in (1, 2, 3):
            publisher.publish(weights(version))
        client = AuxClient(handle, rank=0)
        assert client.call("read", min_version=3)["version"] == 3
        victim, survivor = coordinator.actors["versioned"]
        before = {str(info["pid"]) for info in ray.get([victim.info.remote(),
                                                        survivor.info.remote()])}
        ray.kill(victim, no_restart=False)
        replies: list[dict] = []
        deadline = time.monotonic() + 240
        while not replies or replies[-1]["worker"] in before:  # until the new process serves
            assert time.monotonic() < deadline, "the restarted worker never served"
            replies.append(client.call("read"))
        publisher.publish(weights(4))
        assert client.call("read", min_version=4)["version"] == 4
        stale = [reply for reply in replies if not (consistent(reply) and reply["version"] == 3)]
        assert not stale, stale
        publisher.close()
        client.close()
    finally:
        coordinator.shutdown()


def test_failing_startup_check_names_the_service(local_ray: None) -> None:
    broken = ServiceConfig(impl="encoder", options={"input_dim": 4, "output_dim": 2,
                                                    "no_such_option": 1},
                           cpus_per_worker=0.5, startup_timeout_s=30, max_restarts=0)
    coordinator = _coordinator("brokentest", {"teacher": broken})
    try:
        with pytest.raises(AuxStartupError, match="'teacher'"):
            coordinator.start()
    finally:
        coordinator.shutdown()


class ListSink:
    """A FleetSink that keeps what it was given."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, int]] = []

    def emit(self, step: int, summaries: Mapping[str, ServiceSummary]) -> None:
        self.rows += [(step, name, s.workers_known) for name, s in summaries.items()]


def test_reporter_sends_monitor_summaries_to_sinks_every_n_steps(local_ray: None) -> None:
    monitor = start_monitor("reportertest", stale_after_s=30)
    try:
        sample = WorkerSample("enc", "enc-0", "a", served=3, errors=0, pending=0,
                              queue_wait_s=[0.001], process_s=[0.002])
        ray.get(monitor.record_worker.remote(sample))
        sink = ListSink()
        reporter = FleetReporter(monitor, [sink], every=5)
        for step in range(1, 11):
            reporter.after_step(step)
        assert sink.rows == [(5, "enc", 1), (10, "enc", 1)]
    finally:
        ray.kill(monitor)
