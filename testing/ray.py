"""The one local Ray session a test process shares, and a private one for the tests that
need their own (other resources or environment, a multi-node cluster).

Starting Ray costs seconds (GCS, raylet, workers), so every test that can share runs on one
session per process; pytest-xdist gives each worker process its own."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
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
# `ray start` listens on fixed default ports (GCS 6379, client 10001, dashboard 8265, agent
# 52365, …): each gets a free one here, so the head never meets another Ray on this machine.
PORT_FLAGS = ("--port", "--dashboard-port", "--ray-client-server-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
              "--metrics-export-port", "--runtime-env-agent-port")


def dashboard_missing() -> str | None:
    """Why no local Ray head with a job API can start here (None: it can)."""
    import importlib.util

    if importlib.util.find_spec("aiohttp_cors") or (DASHBOARD_DEPS / "aiohttp_cors").is_dir():
        return None
    return (f"Ray's dashboard needs ray[default]'s extras: `make setup` installs them in "
            f"{DASHBOARD_DEPS}")


@dataclass(frozen=True)
class LocalHead:
    """A Ray head as a RayCluster's head pod runs it: `ray start --head --block`, no driver."""

    url: str
    """Its dashboard (the job API), http://127.0.0.1:PORT."""
    gcs: str
    """Its GCS address, HOST:PORT."""
    pid: int
    """The `ray start` process; the head's processes are its descendants."""

    def processes(self, name: str) -> list[int]:
        """The head's processes whose command line holds `name` (e.g. gcs_server)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with suppress(OSError):
                    parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                    children.setdefault(parent, []).append(int(entry.name))
        found, todo = [], list(children.get(self.pid, []))
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            with suppress(OSError):
                if name in Path(f"/proc/{pid}/cmdline").read_text():
                    found.append(pid)
        return found


@contextmanager
def ray_head(cpus: int = 2, start_s: float = 180) -> Iterator[LocalHead]:
    """A local Ray head in a temporary folder of its own (its address file too, so a plain
    `ray.init()` elsewhere never finds it); stopped, with its processes, after the block.

    Token authentication is off (RAY_AUTH_MODE=disabled): a token left in ~/.ray by another
    Ray would otherwise switch it on for this head only."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    import urllib.request

    from testing.wait import wait_until

    folder = tempfile.mkdtemp(prefix="gkr-ray-", dir="/tmp")  # short: Ray's socket paths
    ports = {flag: _free_port() for flag in PORT_FLAGS}
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
            f"--temp-dir={folder}", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
            "--include-dashboard=true", "--disable-usage-stats", f"--num-cpus={cpus}",
            *(f"{flag}={port}" for flag, port in ports.items())]
    path = os.pathsep.join(p for p in (str(DASHBOARD_DEPS), str(ROOT),
                                       os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "RAY_AUTH_MODE": "disabled"}
    log = Path(folder) / "start.log"  # a file, not a pipe: a full pipe would stall the head
    with log.open("w") as output:
        head = subprocess.Popen(argv, env=env, stdout=output, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{ports['--dashboard-port']}"

    def healthy() -> bool:
        if head.poll() is not None:
            raise AssertionError(f"the Ray head exited: {log.read_text()[-2000:]}")
        try:  # up as a head pod is ready: the GCS answers and the head's raylet is a node
            with urllib.request.urlopen(f"{url}/api/v0/nodes?detail=false", timeout=5) as answer:
                return '"ALIVE"' in answer.read().decode()
        except OSError:
            return False

    try:
        wait_until(healthy, start_s, "the Ray head's dashboard", interval=0.2)
        yield LocalHead(url, f"127.0.0.1:{ports['--port']}", head.pid)
    finally:
        head.terminate()  # `ray start --block` drains and stops every process it started
        head.wait(timeout=90)
        shutil.rmtree(folder, ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
