"""The real-cluster suite's fixture: one run (unique job names, the catalog's cluster and
namespace, the API) whose finalizer deletes everything the run created, even after a failure.

Set GKR_E2E_KUBECONFIG to a kubeconfig that holds the catalog cluster's kube_context;
GKR_E2E_CLUSTER names the cluster (default usc1-prod), GKR_E2E_NAMESPACE the team namespace
(default: the cluster's first team).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from generator.catalog import Catalog
from runtime.identity import selector
from runtime.kube import DEPLOYMENT, JOB, POD, RAYCLUSTER, Kind, Kube, KubeError, NotFound

ROOT = Path(__file__).resolve().parents[2]
KUBECONFIG = os.environ.get("GKR_E2E_KUBECONFIG", "")
SKIP_REASON = ("real-cluster suite: set GKR_E2E_KUBECONFIG to a kubeconfig file holding the "
               "catalog cluster's context (and optionally GKR_E2E_CLUSTER, GKR_E2E_NAMESPACE)")
ENABLED = bool(KUBECONFIG) and Path(KUBECONFIG).is_file()
GKR = str(Path(sys.executable).parent / "gkr")
WAIT_S = 480  # pod placement and per-node checks; under pytest's 600 s per test


@dataclass
class Run:
    """One run of the suite against a cluster: names, scope flags and what later steps need."""

    cluster: str
    namespace: str
    accelerator: str
    api: Kube
    job: str
    ray: str
    found: dict[str, str] = field(default_factory=dict)

    def gkr(self, *args: str, timeout: int = WAIT_S + 60) -> subprocess.CompletedProcess[str]:
        """The installed `gkr` (its real exit codes) with KUBECONFIG set, from the repo root."""
        env = {**os.environ, "KUBECONFIG": KUBECONFIG}
        return subprocess.run([GKR, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)

    def scope(self) -> list[str]:
        return ["--cluster", self.cluster, "--namespace", self.namespace]

    def need(self, key: str) -> str:
        if key not in self.found:
            pytest.fail(f"an earlier step did not record {key!r}; see its failure above")
        return self.found[key]


def eventually(predicate: Callable[[], bool], what: str, timeout_s: float = 180) -> None:
    """Poll `predicate` until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    pytest.fail(f"{what}: not after {timeout_s:.0f} s")


def check_label(node: str) -> str:
    """The gkr.dev/job label `gkr check` gives its Job on `node` (generator.cluster.preflight)."""
    return f"check-{hashlib.sha256(node.encode()).hexdigest()[:10]}"


def _delete(api: Kube, kind: Kind, name: str, namespace: str) -> str | None:
    try:
        api.delete(kind, name, namespace=namespace)
    except NotFound:
        return None
    except KubeError as error:
        return str(error)
    return None


def cleanup(run: Run) -> list[str]:
    """Delete the run's Job, RayCluster, sentinel, `gkr check` Job and any pods left behind
    (Background propagation, so no pod outlives its owner); the failures, if any."""
    targets = [(JOB, run.job), (RAYCLUSTER, run.ray), (DEPLOYMENT, f"{run.ray}-sentinel")]
    labels = [run.job, run.ray]
    if "checked" in run.found:  # only a check this run started: the name is per node
        label = check_label(run.found["checked"])
        targets.append((JOB, f"gkr-{label}"))
        labels.append(label)
    failures = [_delete(run.api, kind, name, run.namespace) for kind, name in targets]
    for label in labels:  # one by one: team RBAC grants delete, not deletecollection
        pods = run.api.list(POD, namespace=run.namespace, labels=selector(job=label))
        failures += [_delete(run.api, POD, p["metadata"]["name"], run.namespace) for p in pods]
    return [f for f in failures if f]


@pytest.fixture(scope="session")
def run() -> Iterator[Run]:
    catalog = Catalog(ROOT)
    name = os.environ.get("GKR_E2E_CLUSTER", "usc1-prod")
    cluster = catalog.clusters.get(name)
    if cluster is None:
        pytest.fail(f"GKR_E2E_CLUSTER={name!r}: not in clusters/ ({', '.join(catalog.clusters)})")
    namespace = (os.environ.get("GKR_E2E_NAMESPACE")
                 or next(iter(cluster.teams.values())).namespace)
    job = f"e2e-{secrets.token_hex(3)}"
    state = Run(cluster=name, namespace=namespace, accelerator=next(iter(cluster.accelerators)),
                api=Kube.connect(cluster.kube_context, KUBECONFIG), job=job, ray=f"{job}-ray")
    yield state
    failures = cleanup(state)
    assert not failures, f"cleanup left objects behind: {failures}"
