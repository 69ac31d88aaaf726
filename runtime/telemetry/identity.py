"""The identity a process stamps on its telemetry rows and crash reports: what its pod's
environment says (runtime.identity), completed with what a run outside Kubernetes knows."""

from __future__ import annotations

import socket
from dataclasses import replace

from runtime.identity import Identity, Role

LOCAL_CLUSTER = "local"  # the cluster of a run outside Kubernetes


def identity(run_id: str, role: Role, rank: int = -1) -> Identity:
    """This process's identity: the pod's environment, else what a local run knows."""
    found = Identity.from_env(run=run_id, role=str(role), rank=rank)
    return replace(found, cluster=found.cluster or LOCAL_CLUSTER,
                   node=found.node or socket.gethostname())
