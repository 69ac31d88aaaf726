"""The preflight from the generator's side: expectations rendered from the accelerator catalog,
the `gkr check` Job on named nodes, and reading the pods' JSON results."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

from generator.catalog import Accelerator, Catalog
from generator.cluster.api import KubeApi, Obj
from generator.cluster.kinds import JOB, POD
from generator.cluster.kubectl import Kubectl, main_container
from generator.errors import GkrError
from generator.resolve import ResolvedJob

ENV_VAR = "GKR_PREFLIGHT"  # read by runtime.preflight in the pod
SHM = {"path": "/dev/shm", "filesystem": "tmpfs"}  # emptyDir medium Memory is a tmpfs


def expectations(
    accelerator: Accelerator | None, node: str | None = None, gpus: int | None = None
) -> dict[str, Any]:
    """The JSON the pod's preflight checks against: all of it comes from the catalog, except
    the GPUs a pod was given (a whole node unless the job asked for fewer)."""
    if accelerator is None:
        return {"gpus": 0} | ({"node": node} if node else {})
    data: dict[str, Any] = {
        "gpus": accelerator.gpus_per_node if gpus is None else gpus,
        "transport_env": {k: v for k, v in accelerator.env.items() if k.startswith("NCCL_")},
        "plugin_paths": accelerator.plugin_paths,
        "mounts": [SHM],
    }
    return data | ({"node": node} if node else {})


def accelerator_of_node(api: KubeApi, catalog: Catalog, node: str) -> tuple[str, Accelerator]:
    """The catalog accelerator whose GKE label the node carries."""
    labels = api.node(node)["metadata"].get("labels") or {}
    value = labels.get(catalog.platform.labels["accelerator"])
    for name, accelerator in catalog.accelerators.items():
        if accelerator.gke_accelerator == value:
            return name, accelerator
    raise GkrError(f"node {node} carries no accelerator of the catalog (label value {value!r})")


def check_job(catalog: Catalog, node: str, accelerator: Accelerator, namespace: str,
              image: str) -> Obj:
    """A Job that runs `python -m runtime.preflight` on one node with all its GPUs."""
    platform = catalog.platform
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    resources = {platform.gpu_resource: accelerator.gpus_per_node}
    container = {
        "name": "preflight", "image": catalog.images.get(image, image),
        "command": ["python", "-m", "runtime.preflight"],
        "env": [{"name": ENV_VAR, "value": json.dumps(expectations(accelerator, node))},
                *({"name": k, "value": v} for k, v in sorted(accelerator.env.items()))],
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, *accelerator.volume_mounts],
        "securityContext": {"privileged": True},  # the kernel log needs CAP_SYSLOG
    }
    pod = {
        "metadata": {"labels": {"gkr.dev/job": f"check-{digest}", "gkr.dev/role": "job"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {platform.labels["hostname"]: node},
            "tolerations": [*accelerator.tolerations,
                            {"key": platform.reservation_taint, "operator": "Exists"}],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory",
                                                      "sizeLimit": accelerator.shm_size}},
                        *accelerator.volumes],
            "containers": [container],
        },
    }
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"gkr-check-{digest}", "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "gkr",
                                "gkr.dev/job": f"check-{digest}"},
                     "annotations": {"gkr.dev/node": node}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 3600, "template": pod},
    }


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


def wait_finished(api: KubeApi, job: Obj, timeout_s: int,
                  progress: Callable[[str], None]) -> Obj:
    """The Job's pod once it has succeeded or failed (a failed preflight exits 1)."""
    meta = job["metadata"]
    selector = f"gkr.dev/job={meta['labels']['gkr.dev/job']}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pods = api.pods(meta["namespace"], selector)
        done = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
        if done:
            return done[0]
        progress(f"{meta['name']}: {[(p.get('status') or {}).get('phase') for p in pods]}")
        for _ in api.watch(POD, meta["namespace"], selector, timeout_s=5):
            break
    raise GkrError(f"{meta['name']} did not finish in {timeout_s} s; see `gkr status`")


def run_on_node(api: KubeApi, job: Obj, timeout_s: int,
                progress: Callable[[str], None]) -> dict[str, Any]:
    api.apply(job)
    pod = wait_finished(api, job, timeout_s, progress)
    lines = list(api.logs(job["metadata"]["namespace"], pod["metadata"]["name"]))
    result = parse_result(lines)
    if result is None:
        node = job["metadata"]["annotations"]["gkr.dev/node"]
        return {"node": node, "passed": False, "figures": {}, "findings": [
            {"check": "preflight", "severity": "error",
             "message": f"no result in the log of {pod['metadata']['name']}"}]}
    api.delete(JOB, job["metadata"]["namespace"], job["metadata"]["name"])
    return result


def wait_running(api: KubeApi, namespace: str, job: str, expected: int, timeout_s: int,
                 progress: Callable[[str], None]) -> list[Obj]:
    """The job's pods once `expected` of them run; progress lines while the cluster places them."""
    deadline, selector = time.monotonic() + timeout_s, f"gkr.dev/job={job}"
    while time.monotonic() < deadline:
        pods = api.pods(namespace, selector)
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if len(running) >= expected:
            return running
        progress(f"{job}: {len(running)}/{expected} pods running")
        for _ in api.watch(POD, namespace, selector, timeout_s=5):
            break
    raise GkrError(f"{job}: pods not running after {timeout_s} s; see `gkr status {job}`")


def expected_pods(job: ResolvedJob) -> int:
    """Pods a placed job runs: its GPU pods, plus the Ray head (and sentinel) of Ray kinds."""
    return job.spec.pods + {"rayjob": 1, "raycluster": 2, "job": 0}[job.kind]


def exec_preflight(kubectl: Kubectl, pod: Obj, expect: dict[str, Any]) -> dict[str, Any]:
    """Run the suite inside a placed pod (kubectl exec) and read its JSON result."""
    name = pod["metadata"]["name"]
    command = ["env", f"{ENV_VAR}={json.dumps(expect | {'node': pod['spec'].get('nodeName')})}",
               "python", "-m", "runtime.preflight"]
    argv = kubectl.exec_argv(name, command, main_container(pod))
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    result = parse_result(done.stdout.splitlines())
    if result is None:
        return {"node": pod["spec"].get("nodeName") or name, "passed": False, "figures": {},
                "findings": [{"check": "preflight", "severity": "error",
                              "message": f"no result from {name}: {done.stderr.strip()[-200:]}"}]}
    return result
