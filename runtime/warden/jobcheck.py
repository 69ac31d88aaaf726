"""`NodeCheck` as a Kubernetes Job pinned to the node (`gkr check` and the stress test).

The Job tolerates the cordon taint (it must run on a cordoned node), takes every GPU of the
node, and reports findings through the container's termination message: with
`FallbackToLogsOnError` the kubelet copies the log tail there, so no log access is needed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from runtime.warden.config import ChecksConfig, CheckSuite
from runtime.warden.errors import Conflict
from runtime.warden.interfaces import Cluster
from runtime.warden.model import CheckResult

Json = dict[str, Any]
_TOLERATIONS = [
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]


def job_name(name: str) -> str:
    """A DNS-1123 Job name derived from the run name (node names can be long)."""
    return "warden-check-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def check_job(config: ChecksConfig, node: str, suite: CheckSuite, name: str, gpus: str) -> Json:
    """The Job manifest of one check run on one node."""
    resources = {config.gpu_resource: gpus} if gpus not in ("", "0") else {}
    container = {
        "name": "check",
        "image": suite.image,
        "command": list(suite.command),
        "resources": {"limits": resources, "requests": resources},
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    pod_spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": _TOLERATIONS,
        "containers": [container],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(name), "namespace": config.namespace,
                     "labels": {"app.kubernetes.io/managed-by": "warden"},
                     "annotations": {"warden.gkr.dev/run": name, "warden.gkr.dev/node": node}},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": int(suite.timeout_s),
                 "ttlSecondsAfterFinished": 86400, "template": {"spec": pod_spec}},
    }


def findings(pods: list[Json]) -> list[str]:
    """Findings from the check pod's termination message: a JSON report or plain lines."""
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses", []):
            message = status.get("state", {}).get("terminated", {}).get("message", "")
            if message:
                return _parse_message(message)
    return []


def _parse_message(message: str) -> list[str]:
    last = message.strip().splitlines()[-1] if message.strip() else ""
    try:
        report = json.loads(last)
    except ValueError:
        return [line for line in message.strip().splitlines()[-5:] if line]
    if isinstance(report, dict) and isinstance(report.get("findings"), list):
        return [str(f) for f in report["findings"]]
    return [last]


class JobNodeCheck:
    """Runs checks as Jobs through the `Cluster` seam."""

    def __init__(self, cluster: Cluster, config: ChecksConfig) -> None:
        self.cluster, self.config = cluster, config

    def start(self, node: str, suite: CheckSuite, name: str) -> None:
        """Create the Job; if a retry finds it already created, join it."""
        gpus = self.cluster.get_node(node).get("status", {}).get("allocatable", {})
        job = check_job(self.config, node, suite, name, str(gpus.get(self.config.gpu_resource, "")))
        try:
            self.cluster.create_job(self.config.namespace, job)
        except Conflict:
            return

    def result(self, name: str) -> CheckResult | None:
        """Pass when the Job succeeded, fail when it failed (or missed its deadline)."""
        namespace, job = self.config.namespace, job_name(name)
        status = self.cluster.get_job(namespace, job).get("status", {})
        if status.get("succeeded"):
            return CheckResult(True, findings(self.cluster.job_pods(namespace, job)))
        failed = any(
            c.get("type") == "Failed" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        if not failed and not status.get("failed"):
            return None
        found = findings(self.cluster.job_pods(namespace, job))
        reasons = [c.get("reason", "") for c in status.get("conditions", []) if c.get("reason")]
        return CheckResult(False, found or reasons or ["check job failed"])
