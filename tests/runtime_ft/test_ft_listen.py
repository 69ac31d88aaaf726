"""torchft's Lighthouse and Manager servers listen on the pod's IP (or loopback), never on
every interface (issue 22, point 3). Real torchft servers; the listening sockets are read
from the kernel (/proc/net/tcp and tcp6, proc(5)), not inferred from what torchft reports."""

from __future__ import annotations

import ipaddress
from datetime import timedelta

import pytest
from torchft._torchft import ManagerServer
from torchft.coordination import LighthouseServer

from runtime.ft.listen import pod_bound, pod_bound_managers, rebind, socket_address
from runtime.identity import LOCAL_HOST, Env, listen_host

LISTEN = "0A"  # the `st` column of a listening socket (include/net/tcp_states.h)


def _listening(port: int) -> set[str]:
    """The local addresses sockets listen on at `port` (proc(5): /proc/net/tcp{,6} hold
    `local_address` as hex host-order words, then the port)."""
    found = set()
    for table, size in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                host, _, hex_port = local.partition(":")
                if state == LISTEN and int(hex_port, 16) == port:
                    raw = bytes.fromhex(host)
                    # Each 32-bit word is in host (little-endian) order.
                    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
                    found.add(str(ipaddress.ip_address(packed)))
    return found


def _port(address: str) -> int:
    return int(address.rstrip("/").rpartition(":")[2])


def test_listen_host_is_the_pod_ip_or_loopback() -> None:
    assert listen_host({Env.POD_IP: "10.4.0.17"}) == "10.4.0.17"
    assert listen_host({}) == LOCAL_HOST
    assert listen_host({Env.POD_IP: ""}) == LOCAL_HOST


def test_ipv6_pod_ips_are_bracketed() -> None:
    assert socket_address("fd00::5", 0) == "[fd00::5]:0"
    assert rebind("[::]:29512", "10.0.0.3") == "10.0.0.3:29512"


def test_lighthouse_listens_on_the_given_host_only() -> None:
    lighthouse = LighthouseServer(bind=socket_address(LOCAL_HOST, 0), min_replicas=1)
    try:
        assert _listening(_port(lighthouse.address())) == {LOCAL_HOST}
    finally:
        lighthouse.shutdown()


def test_manager_server_rebound_from_every_interface_to_the_pod_host() -> None:
    """What torchft's Manager asks for (`[::]:0`, manager.py) is bound on the host instead;
    without the wrapper the same call listens on every interface (`::`)."""
    lighthouse = LighthouseServer(bind=socket_address(LOCAL_HOST, 0), min_replicas=1)
    args = dict(replica_id="r0", lighthouse_addr=lighthouse.address(), hostname=LOCAL_HOST,
                store_addr="127.0.0.1:1", world_size=1,
                heartbeat_interval=timedelta(milliseconds=100),
                connect_timeout=timedelta(seconds=10), quorum_retries=0)
    bound = pod_bound(ManagerServer, lambda: LOCAL_HOST)(bind="[::]:0", **args)
    wide = ManagerServer(bind="[::]:0", **args)
    try:
        assert _listening(_port(bound.address())) == {LOCAL_HOST}
        assert _listening(_port(wide.address())) == {"::"}
    finally:
        bound.shutdown()
        wide.shutdown()
        lighthouse.shutdown()


def test_pod_bound_managers_wraps_once() -> None:
    import torchft.manager

    original = torchft.manager.ManagerServer
    try:
        pod_bound_managers()
        wrapped = torchft.manager.ManagerServer
        pod_bound_managers()
        assert torchft.manager.ManagerServer is wrapped is not original
    finally:
        torchft.manager.ManagerServer = original  # type: ignore[misc]


@pytest.mark.parametrize("bind", ["[::]:0", "0.0.0.0:0"])
def test_rebind_keeps_the_port(bind: str) -> None:
    assert rebind(bind.replace(":0", ":4242"), "10.1.2.3") == "10.1.2.3:4242"
