"""Helpers of Warden's tests: fast configs and an in-process worker. The fixtures they use
(the session's Temporal dev server, the HTTP doubles) live in tests/conftest.py, which the
gkr-ui and torchft tests share."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.testing import WorkflowEnvironment

from runtime.telemetry.events import LogEvents
from runtime.warden.config import WardenConfig, parse_config
from runtime.warden.interfaces import EventLog
from runtime.warden.worker import build_worker, ensure_sweeps, real_seams
from testing.temporal import Loop
from testing.warden import CHECKS


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
        "notify": {"webhook_timeout_s": 2},
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
    """An in-process Warden worker (and its sweeps) on the session loop. Its events go to the
    log unless `events` says otherwise: Warden's store events (GKR_TELEMETRY_DSN, the test
    session's chDB folder) would open that folder from a thread of this test process, which
    then cannot open another folder (chDB serves one per process), racing later tests."""

    def __init__(self, loop: Loop, temporal: WorkflowEnvironment, config: WardenConfig,
                 sweeps: bool = True, events: EventLog | None = None) -> None:
        self.loop, self.config = loop, config
        self.events = events if events is not None else LogEvents()
        self.executor = ThreadPoolExecutor(max_workers=8)
        self.worker = loop.run(self._build(temporal, config))
        self.task = asyncio.run_coroutine_threadsafe(self.worker.run(), loop.loop)
        if sweeps:
            loop.run(ensure_sweeps(temporal.client, config))

    async def _build(self, temporal: WorkflowEnvironment, config: WardenConfig) -> Any:
        # A worker binds to the running loop when it is built.
        return build_worker(temporal.client, config, real_seams(config, self.events),
                            self.executor)

    def stop(self) -> None:
        self.loop.run(self.worker.shutdown())
        self.executor.shutdown(wait=False, cancel_futures=True)
