"""The preflight from the generator's side: expectations rendered from the accelerator catalog,
the `gkr check` Job on named nodes, and reading the pods' JSON results."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from generator.catalog import Catalog
from generator.cluster.status import preflight_record
from generator.errors import BadRequest, ToolFailed
from generator.pods import node_checks
from generator.resolve import ResolvedJob
from runtime.identity import Annotation, Label, selector
from runtime.kube import JOB, POD, Kube, Obj
from runtime.pods import PREFLIGHT, CheckSuite, check_job
from runtime.preflight.result import GateRecord


def described_node(catalog: Catalog, name: str, accelerator: str) -> Obj:
    """A node as `--accelerator` describes it (no cluster at hand): its name and GPU label."""
    found = catalog.accelerators.get(accelerator)
    if found is None:
        raise BadRequest(f"--accelerator {accelerator!r}: the catalog offers "
                         f"{', '.join(sorted(catalog.accelerators))}")
    label = catalog.platform.labels["accelerator"]
    return {"metadata": {"name": name, "labels": {label: found.gke_accelerator}}}


def node_check_job(catalog: Catalog, node: Obj, namespace: str | None, image: str,
                   timeout_s: int, run: str | None = None) -> Obj:
    """The Job that runs the preflight suite on one node with all its GPUs; Warden builds its
    checks with the same settings and builder (`runtime.pods`). Each run gets its own Job."""
    suite = CheckSuite(image=catalog.images.get(image, image), command=PREFLIGHT,
                       timeout_s=timeout_s)
    run = run or f"{node['metadata']['name']}/{uuid.uuid4().hex[:12]}"
    return check_job(node_checks(catalog, namespace).node_check(node, suite, run))


def parse_result(log_lines: list[str]) -> dict[str, Any] | None:
    """The preflight's JSON line: the last line of the log that parses as a result."""
    for line in reversed(log_lines):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and "passed" in result:
            return result
    return None


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase", "Pending"))


def watch_pods(api: Kube, namespace: str, job: str, ready: Callable[[list[Obj]], list[Obj]],
               timeout_s: int, progress: Callable[[str], None]) -> list[Obj] | None:
    """The job's pods as they change, until `ready` picks some (returned) or time runs out.

    A watch opened without a resourceVersion first reports every existing pod as ADDED, so
    the pods are known from its first events; when the server ends a watch, a new one starts
    from that same full picture."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        pods: dict[str, Obj] = {}
        for change, pod in api.watch(POD, namespace=namespace, labels=selector(job=job),
                                     timeout_s=max(1, min(int(left), 60))):
            if change == "DELETED":
                pods.pop(pod["metadata"]["name"], None)
            else:
                pods[pod["metadata"]["name"]] = pod
            if chosen := ready(list(pods.values())):
                return chosen
            progress(f"{job}: " + ", ".join(f"{n} {_phase(p)}" for n, p in sorted(pods.items())))
    return None


def wait_finished(api: Kube, job: Obj, timeout_s: int,
                  progress: Callable[[str], None]) -> Obj:
    """The Job's pod once it has succeeded or failed (a failed preflight exits 1)."""
    meta = job["metadata"]
    done = watch_pods(api, meta["namespace"], meta["labels"][Label.JOB],
                      lambda pods: [p for p in pods if _phase(p) in ("Succeeded", "Failed")],
                      timeout_s, progress)
    if not done:
        raise ToolFailed(f"{meta['name']} did not finish in {timeout_s} s; see `gkr status`")
    return done[0]


def run_on_node(api: Kube, job: Obj, timeout_s: int,
                progress: Callable[[str], None]) -> dict[str, Any]:
    api.apply(job)
    pod = wait_finished(api, job, timeout_s, progress)
    lines = list(api.logs(pod["metadata"]["name"], namespace=job["metadata"]["namespace"]))
    result = parse_result(lines)
    if result is None:
        node = job["metadata"]["annotations"][Annotation.NODE]
        return {"node": node, "passed": False, "figures": {}, "findings": [
            {"check": "preflight", "severity": "error",
             "message": f"no result in the log of {pod['metadata']['name']}"}]}
    api.delete(JOB, job["metadata"]["name"], namespace=job["metadata"]["namespace"])
    return result


def wait_running(api: Kube, namespace: str, job: str, expected: int, timeout_s: int,
                 progress: Callable[[str], None]) -> list[Obj]:
    """The job's pods once `expected` of them run; progress lines while the cluster places them."""
    def running(pods: list[Obj]) -> list[Obj]:
        placed = [p for p in pods if _phase(p) == "Running"]
        return placed if len(placed) >= expected else []

    placed = watch_pods(api, namespace, job, running, timeout_s, progress)
    if not placed:
        raise ToolFailed(f"{job}: pods not running after {timeout_s} s; see `gkr status {job}`")
    return placed


def failed_nodes(results: list[dict[str, Any]]) -> list[str]:
    """The nodes (or pods) whose preflight did not pass."""
    return [str(r["node"]) for r in results if not r["passed"]]


def wait_preflight(api: Kube, job: ResolvedJob, timeout_s: int,
                   progress: Callable[[str], None]) -> GateRecord:
    """The gate's final result (its cmd runs, or the job tears down) once Warden records it
    on the RayJob, each attempt said through `progress`; only watches: the job goes on
    whether anyone waits or not."""
    kind = api.kind(job.traits.api_version, job.traits.object_kind)
    deadline, seen = time.monotonic() + timeout_s, None
    while (left := deadline - time.monotonic()) > 0:
        for _, obj in api.watch(kind, namespace=job.namespace, fields=f"metadata.name={job.name}",
                                timeout_s=max(1, min(int(left), 60))):
            record = preflight_record(obj)
            if record is not None and record != seen:
                seen = record
                progress(f"{job.name}: preflight attempt {record.attempt}/{record.attempts}: "
                         f"{'passed' if record.passed else 'FAILED'}, next {record.next}")
            if record is not None and record.next != "retry":
                return record
    raise ToolFailed(f"{job.name}: no preflight result after {timeout_s} s; the job goes on, "
                     f"see `gkr status {job.name}`")
