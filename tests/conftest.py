"""Session-wide test settings."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Env
from testing.doubles.kube_apiserver import KubeApiServer
from testing.ray import shared_ray, stop_shared_ray
from testing.temporal import Loop, temporal_binary
from testing.warden import CheckJobs, FakeGcp, FakePrometheus

# Ray starts its workers at nice 15 (ray_config_def.h `worker_niceness`; its job manager sets
# RAY_worker_niceness=0 for its own supervisor, dashboard/modules/job/job_manager.py): on a
# machine loaded by other work (CI's CPU burners), the ranks, producers and actors of every
# test then crawl, and torchft's heartbeats go stale. The tests' Rays, in process and in the
# `gkr` processes they start, run their workers at the tests' own priority.
os.environ.setdefault("RAY_worker_niceness", "0")

# Seconds each module took in a recorded run (tools/test-durations.py writes it).
DURATIONS = Path(__file__).with_name("durations.json")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, each in its own order: the parallel test processes
    (pytest-xdist, --dist loadfile) take whole modules in this order, so the long ones start
    at once and the quick ones fill the gaps instead of a long one trailing. A module not yet
    recorded goes by its count of slow tests (a slow test takes about a minute here)."""
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    slow = Counter(_module(item) for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -recorded.get(_module(item), 60.0 * slow[_module(item)]))


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.fixture(autouse=True, scope="session")
def _private_telemetry_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Training runs in tests (and the `gkr` processes they start) write their telemetry to a
    store of the test session, never to the checkout's `.gkr/telemetry` a user may be reading."""
    folder: Path = tmp_path_factory.mktemp("telemetry")
    previous = os.environ.get(Env.TELEMETRY_DSN)
    os.environ[Env.TELEMETRY_DSN] = f"chdb://{folder}"
    yield
    if previous is None:
        os.environ.pop(Env.TELEMETRY_DSN, None)
    else:
        os.environ[Env.TELEMETRY_DSN] = previous


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """The test process's shared local Ray (testing/ray.py); a test needing its own resources
    or environment uses `testing.ray.private_ray` instead."""
    shared_ray()
    yield
    stop_shared_ray()


@pytest.fixture(scope="session")
def loop() -> Iterator[Loop]:
    """The asyncio loop every Temporal object of the session lives in."""
    runner = Loop()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def temporal(loop: Loop) -> Iterator[WorkflowEnvironment]:
    """One real Temporal dev server per test process, stopped at the end; tests keep apart
    through their own task queues and workflow ids."""
    env = loop.run(WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), ui=False,
        namespace=WARDEN_TEMPORAL_NAMESPACE))
    yield env
    loop.run(env.shutdown())


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    """The Kubernetes API test double (no API server can run here)."""
    with KubeApiServer() as server:
        yield server


@pytest.fixture
def check_jobs(kube: KubeApiServer) -> CheckJobs:
    """The Job controller and kubelet of Warden's check Jobs; a test may change `plan`."""
    return CheckJobs(kube)


@pytest.fixture
def doubles(kube: KubeApiServer,
            check_jobs: CheckJobs) -> Iterator[tuple[KubeApiServer, FakePrometheus, FakeGcp]]:
    """Warden's HTTP doubles: the Kubernetes API, Prometheus and Compute Engine."""
    prom = FakePrometheus()
    gcp = FakeGcp(kube=kube)
    yield kube, prom, gcp
    for server in (prom, gcp):
        server.close()
