"""The one Kubernetes layer of GKR: `gkr`'s cluster commands and Warden both reach the API
through `Kube`, on the official `kubernetes` package (its dynamic client and `Watch`).

Objects are plain dicts (the API's JSON). Failures are one family, `KubeError`, whose
`category` the CLI turns into its exit code. Importing this package does not import
`kubernetes`; connecting does.
"""

from runtime.kube._client import FIELD_MANAGER, Kube, Obj, Patch
from runtime.kube._errors import Conflict, Invalid, KubeError, NotFound, Unreachable
from runtime.kube._kinds import (
    DEPLOYMENT,
    EVENT,
    JOB,
    NODE,
    POD,
    RAYCLUSTER,
    RAYJOB,
    WORKLOAD,
    Kind,
)
from runtime.kube._kubeconfig import Context, current_context

__all__ = [
    "DEPLOYMENT", "EVENT", "FIELD_MANAGER", "JOB", "NODE", "POD", "RAYCLUSTER", "RAYJOB",
    "WORKLOAD", "Conflict", "Context", "Invalid", "Kind", "Kube", "KubeError", "NotFound", "Obj",
    "Patch", "Unreachable", "current_context",
]
