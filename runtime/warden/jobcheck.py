"""`NodeCheck` as a Kubernetes Job pinned to the node (the preflight suite and the stress test).

The Job comes from `runtime.pods.check_job`, the builder `gkr check` uses too: it takes every
GPU of the node with the accelerator's mounts and NCCL variables, tolerates the cordon, and
reports findings through the container's termination message (with `FallbackToLogsOnError`
the kubelet copies the log tail there, so no log access is needed).
"""

from __future__ import annotations

import json
from typing import Any

from runtime.kube import Conflict
from runtime.pods import CheckSuite, check_job, check_job_name
from runtime.warden.config import ChecksConfig
from runtime.warden.interfaces import Cluster
from runtime.warden.model import CheckResult

Json = dict[str, Any]


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
        return [_finding(f) for f in report["findings"]]
    return [last]


def _finding(found: object) -> str:
    """A preflight finding is {check, severity, message}; older suites print strings."""
    if isinstance(found, dict) and "message" in found:
        return f"{found.get('check', '?')}: {found['message']}"
    return str(found)


class JobNodeCheck:
    """Runs checks as Jobs through the `Cluster` seam."""

    def __init__(self, cluster: Cluster, config: ChecksConfig) -> None:
        self.cluster, self.config = cluster, config

    def start(self, node: str, suite: CheckSuite, name: str) -> None:
        """Create the Job; if a retry finds it already created, join it."""
        check = self.config.node_check(self.cluster.get_node(node), suite, name)
        try:
            self.cluster.create_job(self.config.namespace, check_job(check))
        except Conflict:
            return

    def result(self, name: str) -> CheckResult | None:
        """Pass when the Job succeeded, fail when it failed (or missed its deadline)."""
        namespace, job = self.config.namespace, check_job_name(name)
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
