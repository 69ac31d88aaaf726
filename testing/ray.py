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


# Ray's dashboard (its job API) needs ray[default]'s extras, which the project's environment
# leaves out: with them installed every ray.init of the suite runs the full dashboard agent.
# `make setup` puts them in this folder, and only a head started by `ray_head` imports them.
DASHBOARD_DEPS = ROOT / ".venv-raydash"
_HEAD = """
import logging, signal, sys
import ray
context = ray.init(address="local", num_cpus={cpus}, include_dashboard=True,
                   dashboard_host="127.0.0.1", dashboard_port={port},
                   logging_level=logging.WARNING, _system_config={system})
print("dashboard", context.dashboard_url, flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
signal.pause()
"""


def dashboard_missing() -> str | None:
    """Why no local Ray head with a job API can start here (None: it can)."""
    import importlib.util

    if importlib.util.find_spec("aiohttp_cors") or (DASHBOARD_DEPS / "aiohttp_cors").is_dir():
        return None
    return (f"Ray's dashboard needs ray[default]'s extras: `make setup` installs them in "
            f"{DASHBOARD_DEPS}")


@contextmanager
def ray_head(cpus: int = 2, environ: dict[str, str] | None = None,
             start_s: float = 180) -> Iterator[str]:
    """A local Ray head with its dashboard (the job API) in a process of its own, as a
    RayCluster's head pod runs one; yields the dashboard's URL and stops the head after.

    Token authentication is off (RAY_AUTH_MODE=disabled): a token left in ~/.ray by another
    Ray would otherwise switch it on for this head only."""
    import os
    import subprocess
    import sys
    import threading

    from testing.wait import wait_until

    path = os.pathsep.join(p for p in (str(DASHBOARD_DEPS), str(ROOT),
                                       os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "RAY_AUTH_MODE": "disabled", **(environ or {})}
    code = _HEAD.format(cpus=cpus, port=_free_port(), system=repr(NO_PRESTART))
    head = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    lines: list[str] = []  # read to the end, so a full pipe never stalls the head
    threading.Thread(target=_drain, args=(head.stdout, lines), daemon=True).start()

    def started() -> str:
        if head.poll() is not None:
            raise AssertionError("the Ray head exited: " + "".join(lines[-20:]))
        return next((line.split()[1] for line in lines if line.startswith("dashboard ")), "")

    try:
        yield "http://" + wait_until(started, start_s, "the Ray head's dashboard")
    finally:
        head.terminate()
        head.wait(timeout=60)


def _drain(stream: Any, lines: list[str]) -> None:
    for line in stream or ():
        lines.append(line)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
