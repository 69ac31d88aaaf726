"""Collective telemetry in rendered pods: GPU pods switch on the NCCL Inspector (with their
accelerator's plugin from the catalog) and the Flight Recorder, and mount their job's dump
folder; CPU pods get neither; every pod reaches ClickHouse through a DSN whose password comes
from a Secret."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from generator.catalog import Catalog
from generator.pods import plan_pods
from generator.policies import pod_problems
from generator.render import render_tree
from generator.telemetry import DUMP_VOLUME
from runtime.identity import Env, Role
from runtime.pods import build_pod

GPU_ACCELERATORS = ["H100", "H100-Mega", "H200", "B200"]
COLLECTIVE_KEYS = {
    "NCCL_PROFILER_PLUGIN", "NCCL_INSPECTOR_ENABLE", "NCCL_INSPECTOR_DUMP_DIR",
    "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "TORCH_FR_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_ENABLE_TIMING",
}


def _pods(repo, spec: dict[str, Any]) -> dict[Role, dict[str, Any]]:
    repo.write_spec("tele", spec)
    job = render_tree(repo.root, use_cache=False).jobs[0]
    return {role: build_pod(plan) for role, plan in plan_pods(job).items()}


def _container(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"]["containers"][0]


def _values(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _container(pod).get("env", []) if "value" in e}


def _mounts(pod: dict[str, Any]) -> dict[str, str]:
    """mountPath → subPath of the telemetry volume's mounts."""
    return {m["mountPath"]: m["subPath"] for m in _container(pod).get("volumeMounts", [])
            if m["name"] == DUMP_VOLUME}


@pytest.mark.parametrize("accelerator", GPU_ACCELERATORS)
def test_gpu_pods_record_collectives_with_the_catalogs_plugin(repo, spec, accelerator) -> None:
    pods = _pods(repo, spec(accelerator=accelerator))
    worker = _values(pods[Role.WORKER])
    plugin = Catalog(repo.root).accelerators[accelerator].nccl_inspector_plugin
    assert plugin and worker["NCCL_PROFILER_PLUGIN"] == plugin
    assert worker["NCCL_INSPECTOR_ENABLE"] == "1"
    assert worker["NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"] == "30000000"
    assert (worker["TORCH_FR_BUFFER_SIZE"], worker["TORCH_NCCL_DUMP_ON_TIMEOUT"],
            worker["TORCH_NCCL_ENABLE_TIMING"]) == ("2000", "1", "1")
    # Both dump locations are the job's own subfolder of the node folder.
    mounts = _mounts(pods[Role.WORKER])
    assert mounts[worker["NCCL_INSPECTOR_DUMP_DIR"]] == "team-ml/tele"
    fr_folder, _, prefix = worker["TORCH_FR_DUMP_TEMP_FILE"].rpartition("/")
    assert (mounts[fr_folder], prefix) == ("team-ml/tele/fr", "rank_")
    node_dir = Catalog(repo.root).platform.telemetry.node_dir
    volumes = {v["name"]: v for v in pods[Role.WORKER]["spec"]["volumes"]}
    assert volumes[DUMP_VOLUME]["hostPath"] == {"path": node_dir, "type": "DirectoryOrCreate"}


@pytest.mark.parametrize("kind", ["rayjob", "raycluster", "job"])
def test_cpu_pods_record_no_collectives(repo, spec, kind: str) -> None:
    changes: dict[str, Any] = {"kind": kind, "accelerator": None, "pods": None}
    if kind == "raycluster":
        changes["cmd"] = None
    pods = _pods(repo, spec(**changes))
    for role, pod in pods.items():
        assert not COLLECTIVE_KEYS & set(_values(pod)), role
        assert _mounts(pod) == {} and DUMP_VOLUME not in str(pod["spec"].get("volumes")), role


def test_the_head_of_a_gpu_job_records_no_collectives(repo, spec) -> None:
    head = _pods(repo, spec())[Role.HEAD]
    assert not COLLECTIVE_KEYS & set(_values(head)) and _mounts(head) == {}


def test_an_accelerator_without_a_plugin_keeps_the_flight_recorder(repo, spec) -> None:
    path = repo.root / "platform/catalog/accelerators.yaml"
    catalog = yaml.safe_load(path.read_text())
    del catalog["accelerators"]["H200"]["nccl_inspector_plugin"]
    path.write_text(yaml.safe_dump(catalog))
    worker = _values(_pods(repo, spec(accelerator="H200"))[Role.WORKER])
    assert not any(name.startswith("NCCL_INSPECTOR") or name == "NCCL_PROFILER_PLUGIN"
                   for name in worker)
    assert worker["TORCH_FR_DUMP_TEMP_FILE"].endswith("/fr/rank_")


def test_the_users_env_may_switch_the_inspector_off(repo, spec) -> None:
    worker = _values(_pods(repo, spec(env={"NCCL_INSPECTOR_ENABLE": "0"}))[Role.WORKER])
    assert worker["NCCL_INSPECTOR_ENABLE"] == "0"


@pytest.mark.parametrize("accelerator", ["H200", None])
def test_every_pod_gets_the_dsn_with_its_password_from_a_secret(repo, spec, accelerator) -> None:
    pods = _pods(repo, spec(accelerator=accelerator, pods=2 if accelerator else None))
    telemetry = Catalog(repo.root).platform.telemetry
    for role, pod in pods.items():
        if role == Role.SENTINEL:
            continue
        env = _container(pod)["env"]
        names = [e["name"] for e in env]
        # Kubernetes expands $(NAME) only from variables defined earlier in the list.
        assert names.index(Env.TELEMETRY_PASSWORD) < names.index(Env.TELEMETRY_DSN)
        password = env[names.index(Env.TELEMETRY_PASSWORD)]
        assert password["valueFrom"]["secretKeyRef"] == {
            "name": telemetry.secret, "key": telemetry.ingest_key, "optional": True}
        assert _values(pod)[Env.TELEMETRY_DSN] == (
            f"http://ingest:$({Env.TELEMETRY_PASSWORD})@clickhouse-telemetry.telemetry.svc:8123"
            "/telemetry")


def test_only_gpu_pods_may_mount_the_telemetry_folder(repo, spec) -> None:
    catalog = Catalog(repo.root)
    node_dir = catalog.platform.telemetry.node_dir
    worker = _pods(repo, spec())[Role.WORKER]["spec"]
    assert pod_problems(worker, catalog.accelerators["H200"], node_dir) == []
    assert any("host path '/var/lib/gkr/telemetry'" in p
               for p in pod_problems(worker, None, node_dir))
