"""A DiLoCo experiment spec through the generator: `gkr render` writes the synchroniser's Job
and Service and one learner RayJob per cluster overlay, all with the run identity;
`gkr submit --dry-run` shows the same manifests; the rules refuse what could not work, at
the spec's file, line and field. What the pods get is what the runtime reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.errors import InvalidInput
from generator.render import render_tree
from runtime.diloco.config import KEY_DIR, DilocoConfig, SynchroniserConfig, with_deployment
from runtime.identity import Env, Label
from runtime.run.config import build_config
from tests.cli.conftest import gkr

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "jobs/llm/llm-diloco-7b.yaml"
SYNC = "kustomize/overlays/usc1-prod/jobs/team-llm/llm-x.yaml"
US = "kustomize/overlays/usc1-prod/jobs/team-llm/llm-x-us.yaml"
EU = "kustomize/overlays/euw4-prod/jobs/team-llm/llm-x-eu.yaml"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository with the real catalog and clusters, and no specs yet."""
    for folder in ("platform/catalog", "clusters"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    (tmp_path / "jobs/llm/env").mkdir(parents=True)
    shutil.copy(REPO / "jobs/llm/env/pretrain.yaml", tmp_path / "jobs/llm/env")
    return tmp_path


def _example(**changes: Any) -> dict[str, Any]:
    spec = yaml.safe_load(EXAMPLE.read_text())
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = spec
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is None:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return spec


def _write(root: Path, spec: dict[str, Any]) -> Path:
    path = root / "jobs/llm/llm-x.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _worker(rayjob: dict[str, Any]) -> dict[str, Any]:
    spec = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    return dict(spec["containers"][0])


def _workloads(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job file's documents less its NetworkPolicy, of which there is exactly one."""
    policies = [d for d in documents if d["kind"] == "NetworkPolicy"]
    assert len(policies) == 1
    return [d for d in documents if d["kind"] != "NetworkPolicy"]


def test_an_experiment_renders_the_synchroniser_and_a_learner_per_cluster(root: Path) -> None:
    _write(root, _example())
    tree = render_tree(root, use_cache=False)
    job, service = _workloads(tree.manifests[SYNC])
    (us,), (eu,) = _workloads(tree.manifests[US]), _workloads(tree.manifests[EU])
    assert (job["kind"], service["kind"], us["kind"], eu["kind"]) == (
        "Job", "Service", "RayJob", "RayJob")
    for document in (job, service, us, eu):
        assert document["metadata"]["labels"][Label.RUN] == "llm-x"
    assert (us["metadata"]["labels"][Label.LEARNER], eu["metadata"]["labels"][Label.LEARNER]) \
        == ("us", "eu")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["loadBalancerIP"] == "34.118.12.40"
    assert service["spec"]["loadBalancerSourceRanges"] == ["35.204.10.0/28"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()  # it selects the Job's pod
    sync_env = _env(job["spec"]["template"]["spec"]["containers"][0])
    assert sync_env[Env.RUN] == "llm-x" and Env.LEARNER not in sync_env
    settings = SynchroniserConfig.model_validate_json(sync_env[Env.DILOCO])
    assert (settings.bind, settings.learners, settings.round_timeout_s) == (
        "tcp://*:5555", ("us", "eu"), 600.0)
    endpoints = {}
    for name, rayjob in (("us", us), ("eu", eu)):
        env = _env(_worker(rayjob))
        assert (env[Env.RUN], env[Env.LEARNER]) == ("llm-x", name)
        endpoints[name] = DilocoConfig.model_validate_json(env[Env.DILOCO]).endpoint
    assert endpoints == {"us": "tcp://llm-x.team-llm.svc.cluster.local:5555",
                         "eu": "tcp://34.118.12.40:5555"}


def test_what_a_learner_pod_gets_is_what_the_runtime_reads(root: Path) -> None:
    _write(root, _example())
    (eu,) = _workloads(render_tree(root, use_cache=False).manifests[EU])
    raw = {"checkpoint": {"uri": "gs://bucket/run"}}
    config = build_config(with_deployment(raw, _env(_worker(eu))))
    assert config.diloco.enabled and config.diloco.learner == "eu"
    assert (config.diloco.index, config.diloco.learners, config.diloco.inner_steps) == (1, 2, 500)
    assert config.checkpoint is not None
    assert config.checkpoint.uri == "gs://bucket/run/learners/eu"


def test_submit_dry_run_shows_the_rendered_manifests(root: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(root, _example())
    rendered = render_tree(root, use_cache=False).manifests
    monkeypatch.chdir(root)
    ran = gkr("submit", "-f", str(path), "--dry-run")
    assert ran.code == 0, ran.err
    shown = [d for d in yaml.safe_load_all(ran.out) if d is not None]
    assert shown == [*rendered[SYNC], *rendered[US], *rendered[EU]]
    assert "# llm-x-eu: cluster euw4-prod, namespace team-llm" in ran.out
    refused = gkr("submit", "-f", str(path), "--gitops")
    assert refused.code == 1 and "renders to several clusters" in refused.err


MISTAKES = [
    ({"diloco.learners.1.cluster": "nowhere"}, "diloco.learners.1.cluster", "unknown cluster"),
    ({"diloco.learners.0.accelerator": "B200"}, "diloco.learners.0.accelerator",
     "'B200' is not offered by usc1-prod"),
    ({"diloco.learners.1.pods": 40}, "diloco.learners.1.pods", "a4-b200 has 16 nodes"),
    ({"diloco.learners.1.name": "us"}, "diloco.learners.1.name", "named twice"),
    ({"accelerator": "H200", "diloco.learners.1.accelerator": None},
     "accelerator", "for learner eu: 'H200' is not offered by euw4-prod"),
    ({"diloco.synchroniser.expose": "cluster", "diloco.synchroniser.address": None,
      "diloco.synchroniser.source_ranges": None}, "diloco.learners.1.cluster",
     "cannot reach the synchroniser's ClusterIP Service"),
    ({"diloco.synchroniser.address": "10.0.0.9"}, "diloco.synchroniser.address",
     "private: learners on other clusters cannot reach it"),
    ({"diloco.synchroniser.address": None}, "diloco.synchroniser.address", "reserved IPv4"),
    ({"diloco.synchroniser.source_ranges": ["0.0.0.0/0"]},
     "diloco.synchroniser.source_ranges.0", "admits everyone"),
    ({"diloco.synchroniser.source_ranges": None}, "diloco.synchroniser.source_ranges",
     "egress (NAT) ranges"),
    ({"diloco.learner_timeout": "5m"}, "diloco.learner_timeout", "longer than round_timeout"),
    ({"diloco.synchroniser.cpus": 64}, "diloco.synchroniser.cpus", "at most 30"),
    ({"diloco.learners.0.name": "US"}, "diloco.learners.0.name", "should match pattern"),
    ({"kind": "job"}, "diloco", "learners are rayjobs"),
    ({"diloco.outer": {"momentum": 0}}, "diloco.outer", "nesterov needs momentum"),
]


@pytest.mark.parametrize(("changes", "field", "words"), MISTAKES)
def test_a_mistake_names_the_spec_field_and_line(root: Path, changes: dict[str, Any],
                                                 field: str, words: str) -> None:
    path = _write(root, _example(**{key: value for key, value in changes.items()}))
    with pytest.raises(InvalidInput) as raised:
        render_tree(root, use_cache=False)
    found = [p for p in raised.value.problems if p.field == field]
    assert found, [str(p) for p in raised.value.problems]
    assert words in found[0].message and found[0].file == "jobs/llm/llm-x.yaml"
    assert found[0].line is not None and found[0].line <= len(path.read_text().splitlines())


def test_the_committed_example_renders_and_parses() -> None:
    rendered = json.dumps(render_tree(REPO).manifests[
        "kustomize/overlays/euw4-prod/jobs/team-llm/llm-diloco-7b-eu.yaml"])
    assert "tcp://34.118.12.40:5555" in rendered


def test_a_cached_experiment_gives_back_the_same_jobs_and_documents(root: Path) -> None:
    _write(root, _example())
    first = render_tree(root)
    again = render_tree(root)  # every job from the render cache: rebuilt from the spec
    assert again.files == first.files
    assert [job.name for job in again.jobs] == [job.name for job in first.jobs]
    for fresh, cached in zip(first.jobs, again.jobs, strict=True):
        assert (cached.workload, cached.gkr_env, cached.exposure) == (
            fresh.workload, fresh.gkr_env, fresh.exposure)
    for path in (SYNC, US, EU):
        assert again.manifests[path] == first.manifests[path]


def _pod_specs(document: dict[str, Any]) -> list[dict[str, Any]]:
    spec = document["spec"]
    if document["kind"] == "Job":
        return [spec["template"]["spec"]]
    cluster = spec["rayClusterSpec"]
    return [cluster["headGroupSpec"]["template"]["spec"],
            *(group["template"]["spec"] for group in cluster["workerGroupSpecs"])]


def test_every_pod_of_an_experiment_mounts_its_own_key_secret(root: Path) -> None:
    """The synchroniser's pod and every pod of a learner (its rank 0 may run on any of
    them) mount the part's Secret read-only, 0400, where the rendered settings look."""
    _write(root, _example())
    manifests = render_tree(root, use_cache=False).manifests
    parts = {"llm-x": manifests[SYNC][0], "llm-x-us": manifests[US][0],
             "llm-x-eu": manifests[EU][0]}
    for job, document in parts.items():
        for pod in _pod_specs(document):
            volume = next(v for v in pod["volumes"] if v["name"] == "diloco-keys")
            assert volume["secret"] == {"secretName": f"{job}-diloco-keys", "defaultMode": 0o400}
            container = pod["containers"][0]
            mount = next(m for m in container["volumeMounts"] if m["name"] == "diloco-keys")
            assert mount == {"name": "diloco-keys", "mountPath": KEY_DIR, "readOnly": True}
            settings = json.loads(_env(container)[Env.DILOCO])
            assert settings["keys"] == KEY_DIR and not settings["plaintext"]
