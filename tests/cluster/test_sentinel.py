"""The sentinel against real TCP listeners on loopback (no test double needed)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from runtime.errors import ConfigError
from runtime.sentinel import SentinelConfig, parse_args, reachable, watch


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield server
    server.close()


def closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def test_reachable_tells_open_from_closed(listener):
    assert reachable("127.0.0.1", listener.getsockname()[1], 1.0)
    assert not reachable("127.0.0.1", closed_port(), 1.0)


def test_watch_keeps_running_while_the_head_answers(listener):
    config = SentinelConfig(host="127.0.0.1", port=listener.getsockname()[1], interval_s=0.01,
                            failures=2, max_probes=5)
    assert watch(config, sleep=lambda _: None) == 0


def test_watch_exits_non_zero_after_consecutive_failures():
    sleeps: list[float] = []
    config = SentinelConfig(host="127.0.0.1", port=closed_port(), interval_s=0.5, failures=3,
                            max_probes=10)
    assert watch(config, sleep=sleeps.append) == 1
    assert sleeps == [0.5, 0.5]  # exited at the third failure, before sleeping again


def test_address_errors_name_the_flag():
    with pytest.raises(ConfigError, match="--address"):
        parse_args(["--address", "no-port"])
    with pytest.raises(ConfigError, match="failures"):
        parse_args(["--address", "h:1", "--failures", "0"])


def test_module_exit_code_as_kubernetes_sees_it(listener):
    port = listener.getsockname()[1]
    alive = subprocess.run([sys.executable, "-m", "runtime.sentinel", "--address",
                            f"127.0.0.1:{port}", "--interval", "0.01", "--max-probes", "2"],
                           capture_output=True, text=True, timeout=60)
    assert alive.returncode == 0 and "reachable" in alive.stderr
    dead = subprocess.run([sys.executable, "-m", "runtime.sentinel", "--address",
                           f"127.0.0.1:{closed_port()}", "--interval", "0.01", "--failures", "2"],
                          capture_output=True, text=True, timeout=60)
    assert dead.returncode == 1 and "unreachable for 2 consecutive probes" in dead.stderr
