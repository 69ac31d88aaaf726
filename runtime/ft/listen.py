"""Where torchft's servers listen: the pod's own IP, never every interface.

torchft binds its Lighthouse where it is told (`LighthouseServer(bind=...)`, torchft
0.2.0 `_torchft.pyi`), but its Manager builds the bind address itself, `f"[::]:{port}"`
(torchft/manager.py, `Manager.__init__`, group rank 0), with no parameter or variable to
change it. `pod_bound_managers` wraps the ManagerServer that torchft.manager calls so that
the same port is bound on `listen_host()` instead. In a cluster pod the job's NetworkPolicy
admits these ports from the job's own pods only; bound to the pod IP they are not reachable
through any other interface of the pod either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime.identity import listen_host


def socket_address(host: str, port: int | str) -> str:
    """host:port as torchft's Rust servers parse a bind address (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def rebind(bind: str, host: str) -> str:
    """torchft's own bind address (`[::]:<port>`) moved to `host`, the port kept."""
    return socket_address(host, bind.rpartition(":")[2])


def pod_bound(server: Callable[..., Any], host: Callable[[], str] = listen_host
              ) -> Callable[..., Any]:
    """A ManagerServer factory that binds `host()` where torchft asked for every interface.
    torchft.manager passes every argument by keyword (manager.py, `ManagerServer(...)`)."""
    def make(*, bind: str, **kwargs: Any) -> Any:
        return server(bind=rebind(bind, host()), **kwargs)

    make.pod_bound = True  # type: ignore[attr-defined]
    return make


def pod_bound_managers() -> None:
    """Make torchft's Managers in this process bind the pod's IP (idempotent)."""
    import torchft.manager

    if not getattr(torchft.manager.ManagerServer, "pod_bound", False):
        torchft.manager.ManagerServer = pod_bound(torchft.manager.ManagerServer)
