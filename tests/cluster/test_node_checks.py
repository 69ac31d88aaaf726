"""One builder for node checks: `gkr check` and Warden make the same Job for the same node, and
that Job asks for the node's GPUs with the accelerator's mounts and preflight expectations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.catalog import Catalog
from generator.cluster.preflight import node_check_job
from generator.platform.warden import CONFIGMAP
from generator.pods import RUNTIME_IMAGE
from runtime.errors import ConfigError
from runtime.identity import Env
from runtime.warden.config import ChecksConfig, parse_config
from runtime.warden.jobcheck import JobNodeCheck

ROOT = Path(__file__).resolve().parents[2]
GKR = str(Path(sys.executable).with_name("gkr"))


class OneNode:
    """The two calls of Warden's `Cluster` seam a check start makes, recorded (no I/O)."""

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.created: list[dict[str, Any]] = []

    def get_node(self, name: str) -> dict[str, Any]:
        assert name == self.node["metadata"]["name"]
        return self.node

    def create_job(self, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
        self.created.append(job)
        return job


def h200_node(catalog: Catalog, name: str = "gke-node-1") -> dict[str, Any]:
    labels = catalog.platform.labels
    return {"metadata": {"name": name, "labels": {
        labels["accelerator"]: catalog.accelerators["H200"].gke_accelerator,
        labels["hostname"]: name}}}


def warden_checks() -> ChecksConfig:
    """Warden's check settings, read from the ConfigMap `gkr render` committed."""
    (configmap,) = yaml.safe_load_all((ROOT / CONFIGMAP).read_text())
    return parse_config(yaml.safe_load(configmap["data"]["config.yaml"])).checks


def test_gkr_check_and_warden_make_the_same_job_for_a_node() -> None:
    catalog = Catalog(ROOT)
    node = h200_node(catalog)
    config = warden_checks()
    timeout = int(config.preflight.timeout_s)
    ours = node_check_job(catalog, node, None, RUNTIME_IMAGE, timeout, run="incident-7/preflight/1")
    cluster = OneNode(node)
    JobNodeCheck(cluster, config).start("gke-node-1", config.preflight,  # type: ignore[arg-type]
                                        "incident-7/preflight/1")
    assert cluster.created == [ours]
    pod = ours["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
    accelerator = catalog.accelerators["H200"]
    assert all(mount in container["volumeMounts"] for mount in accelerator.volume_mounts)
    assert all(volume in pod["volumes"] for volume in accelerator.volumes)
    expect = json.loads(next(e["value"] for e in container["env"] if e["name"] == Env.PREFLIGHT))
    assert expect["gpus"] == 8 and expect["plugin_paths"] == accelerator.plugin_paths
    assert expect["transport_env"] == {k: v for k, v in accelerator.env.items()
                                       if k.startswith("NCCL_")}


def test_a_node_of_an_unknown_accelerator_is_refused_not_checked_without_gpus() -> None:
    catalog = Catalog(ROOT)
    node = h200_node(catalog)
    node["metadata"]["labels"][catalog.platform.labels["accelerator"]] = "nvidia-tesla-k80"
    config = warden_checks()
    with pytest.raises(ConfigError, match=r"nvidia-tesla-k80.*cannot be checked"):
        JobNodeCheck(OneNode(node), config).start(  # type: ignore[arg-type]
            "gke-node-1", config.preflight, "run")


def test_check_dry_run_prints_the_job_without_a_cluster(tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "absent")}
    done = subprocess.run([GKR, "check", "gke-node-1", "--cluster", "usc1-prod",
                           "--accelerator", "H200", "--dry-run"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (job,) = list(yaml.safe_load_all(done.stdout))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"nvidia.com/gpu": 8}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {m["mountPath"] for m in Catalog(ROOT).accelerators["H200"].volume_mounts} <= mounts


def test_check_dry_run_names_the_accelerators_it_knows(tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "absent")}
    done = subprocess.run([GKR, "check", "n", "--cluster", "usc1-prod", "--accelerator", "K80",
                           "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and "H200" in done.stderr and "Traceback" not in done.stderr
