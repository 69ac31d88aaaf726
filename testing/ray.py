"""The one local Ray session a test process shares, and a private one for the tests that
need their own (other resources or environment, a multi-node cluster).

Starting Ray costs seconds (GCS, raylet, workers), so every test that can share runs on one
session per process; pytest-xdist gives each worker process its own."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray

ROOT = Path(__file__).resolve().parents[1]
# Logical CPUs, not cores: enough for the widest shared run (two torchft groups of 2 ranks
# and their producers); Ray only counts them when placing actors.
SHARED_CPUS = 8

# Ray's raylet prestarts one idle worker per logical CPU for the first driver
# (`prestart_worker_first_driver`, ray_config_def.h): 8 interpreters per test process that
# most tests never use, started on 2 cores beside the tests.
NO_PRESTART = {"prestart_worker_first_driver": False}

_shared = False


def shared_ray() -> None:
    """Connect this process to its shared local Ray, starting it on first use (or again after
    a private one). Its workers import the checkout (test modules name targets in tests.*)."""
    global _shared
    if _shared and ray.is_initialized():
        return
    ray.shutdown()
    # address="local": a new instance even while a test's multi-node Cluster is up, whose
    # address plain ray.init() would otherwise find (ray._private.services,
    # get_ray_address_from_environment: /tmp/ray/ray_current_cluster).
    ray.init(address="local", num_cpus=SHARED_CPUS, include_dashboard=False,
             logging_level=logging.WARNING,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}},
             _system_config=NO_PRESTART)
    _shared = True


def stop_shared_ray() -> None:
    """End the shared session (at the end of the test process)."""
    global _shared
    if _shared:
        ray.shutdown()
    _shared = False


@contextmanager
def private_ray(**init: Any) -> Iterator[None]:
    """A Ray of the caller's own, started with `ray.init(**init)`; the shared session (Ray has
    one per process) is stopped meanwhile and started again afterwards if it was up."""
    global _shared
    was_shared = _shared and ray.is_initialized()
    ray.shutdown()
    _shared = False
    ray.init(**init)
    try:
        yield
    finally:
        ray.shutdown()
        if was_shared:
            shared_ray()
