"""Rendering the tree: deterministic, atomic, cleans up, and the CLI around it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator.errors import InvalidInput
from generator.output import diff_tree, write_tree
from generator.render import render_tree
from generator.specs import load_spec

REPO = Path(__file__).resolve().parents[2]
GKR = str(Path(sys.executable).with_name("gkr"))
JOB_FILE = "kustomize/overlays/all-accelerators/jobs/team-ml/{}.yaml"


def gkr(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GKR, *args], cwd=cwd, capture_output=True, text=True, check=False)


def test_second_render_changes_no_byte(repo, spec) -> None:
    repo.write_spec("a", spec())
    repo.write_spec("b", spec(kind="job", pods=1, gpus=1))
    first = write_tree(repo.root, render_tree(repo.root))
    assert JOB_FILE.format("a") in first.written
    before = repo.snapshot()
    again = write_tree(repo.root, render_tree(repo.root))
    uncached = render_tree(repo.root, use_cache=False)
    assert not again and repo.snapshot() == before
    assert uncached.files == render_tree(repo.root).files


def test_deleted_spec_output_is_removed(repo, spec) -> None:
    keep, drop = repo.write_spec("keep", spec()), repo.write_spec("drop", spec())
    write_tree(repo.root, render_tree(repo.root))
    drop.unlink()
    changes = write_tree(repo.root, render_tree(repo.root))
    assert changes.removed == [JOB_FILE.format("drop")]
    assert not (repo.root / JOB_FILE.format("drop")).exists()
    assert (repo.root / JOB_FILE.format(keep.stem)).is_file()


def test_jobs_are_not_in_the_overlay_kustomization(repo, spec) -> None:
    """Argo CD syncs the jobs folder as plain manifests: `kustomize build` of an overlay that
    listed every job would grow with the square of the fleet's jobs."""
    repo.write_spec("job-a", spec())
    tree = render_tree(repo.root)
    overlay = tree.files["kustomize/overlays/all-accelerators/kustomization.yaml"]
    assert "jobs/" not in overlay and "platform/namespaces.yaml" in overlay
    assert JOB_FILE.format("job-a") in tree.files
    assert "kustomize/overlays/all-accelerators/jobs/_folder.yaml" in tree.files


def test_failed_render_leaves_the_tree_as_it_was(repo, spec) -> None:
    repo.write_spec("good", spec())
    write_tree(repo.root, render_tree(repo.root))
    before = repo.snapshot()
    repo.write_spec("good", spec(pods=1, gpus=4))  # a valid change that must not land alone
    repo.write_spec("bad", spec(gpus=99))
    with pytest.raises(InvalidInput):
        write_tree(repo.root, render_tree(repo.root))
    assert repo.snapshot() == before


def test_cache_follows_env_file_changes(repo, spec) -> None:
    path = repo.write_spec("uses-env", spec(env_file="env/run.yaml", env={"B": "spec"}))
    env = path.parent / "env/run.yaml"
    env.parent.mkdir()
    env.write_text("A: one\nB: file\n")
    first = render_tree(repo.root).manifests[JOB_FILE.format("uses-env")]
    env.write_text("A: two\nB: file\n")
    second = render_tree(repo.root).manifests[JOB_FILE.format("uses-env")]
    worker = lambda docs: docs[0]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]  # noqa: E731
    values = lambda docs: {e["name"]: e.get("value")  # noqa: E731
                           for e in worker(docs)["template"]["spec"]["containers"][0]["env"]}
    assert values(first)["A"] == "one" and values(second)["A"] == "two"
    assert values(second)["B"] == "spec"  # the spec's env wins over the env file
    assert values(second)["NCCL_NET"] == "gIB"  # accelerator facts from the catalog


def test_flags_override_file_values(repo, spec) -> None:
    path = repo.write_spec("flagged", spec(pods=2))
    loaded = load_spec(path, repo.root, {"pods": 3, "preemptible": True})
    assert loaded.spec.pods == 3 and loaded.spec.preemptible
    with pytest.raises(InvalidInput) as raised:
        load_spec(path, repo.root, {"pods": 0})
    (problem,) = raised.value.problems
    assert (problem.file, problem.field) == ("command line", "--pods")


def test_rendered_job_shape(repo, spec) -> None:
    repo.write_spec("shape", spec(preemptible=True, rack_affinity={"level": "host",
                                                                    "required": True}))
    rayjob, _policy = render_tree(repo.root).manifests[JOB_FILE.format("shape")]
    assert rayjob["spec"]["shutdownAfterJobFinishes"] is True
    assert rayjob["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "ml"
    assert rayjob["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "gkr-preemptible"
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    worker_group = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    worker = worker_group["template"]["spec"]
    assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": "ray-heads"}
    assert worker["nodeSelector"]["cloud.google.com/gce-machine-type"] == "a3-ultragpu-8g"
    assert worker["priorityClassName"] == "gkr-preemptible"
    assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    # Whole nodes: the node's allocatable CPU and memory by default.
    assert worker["containers"][0]["resources"]["requests"]["cpu"] == 216
    term = worker["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "cloud.google.com/gce-topology-host"
    assert worker_group["minReplicas"] == 0  # preemptible workers may be reclaimed


def test_raycluster_has_a_sentinel(repo, spec) -> None:
    repo.write_spec("pool", spec(kind="raycluster", cmd=None))
    raycluster, sentinel, _policy = render_tree(repo.root).manifests[JOB_FILE.format("pool")]
    assert raycluster["kind"] == "RayCluster" and sentinel["kind"] == "Deployment"
    command = sentinel["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "runtime.sentinel"]
    # It asks the head's API on the dashboard port, and knows whom to tell when idle.
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags["--dashboard"].startswith("http://pool-head-svc.team-ml.svc")
    assert flags["--dashboard"].endswith(":8265") and flags["--name"] == "pool"
    assert flags["--owner"] == raycluster["metadata"]["annotations"]["gkr.dev/owner"]
    assert int(flags["--idle-after"]) > 0  # the cluster catalog's raycluster_idle_after


def test_render_check_reports_a_stale_tree_with_a_diff(repo, spec) -> None:
    path = repo.write_spec("stale", spec())
    assert gkr("render", cwd=repo.root).returncode == 0
    assert gkr("render", "--check", cwd=repo.root).returncode == 0
    path.write_text(path.read_text().replace("pods: 2", "pods: 3"))
    result = gkr("render", "--check", cwd=repo.root)
    assert result.returncode == 3
    assert "-      replicas: 2" in result.stdout and "+      replicas: 3" in result.stdout
    assert "stale" in result.stderr and "Traceback" not in result.stderr
    assert "replicas: 3" in diff_tree(repo.root, render_tree(repo.root))


def test_validate_names_file_line_and_field_without_traceback(repo, spec) -> None:
    repo.write_spec("wrong", spec(gpus=12))
    result = gkr("validate", cwd=repo.root)
    assert result.returncode == 1
    assert "jobs/ml/wrong.yaml:" in result.stderr and "gpus:" in result.stderr
    assert "Traceback" not in result.stderr


def test_validate_builds_overlays_with_kubectl(repo, spec) -> None:
    repo.write_spec("ok", spec())
    assert gkr("render", cwd=repo.root).returncode == 0  # validate checks the tree on disk
    result = gkr("validate", cwd=repo.root)
    assert result.returncode == 0, result.stderr
    assert "kustomizations built" in result.stdout


def test_schema_command_prints_the_spec_json_schema() -> None:
    result = gkr("schema", cwd=REPO)  # the catalog's names are its enums (tests/cli)
    schema = json.loads(result.stdout)
    assert schema["properties"]["kind"]["enum"] == ["rayjob", "raycluster", "job"]
    assert schema["additionalProperties"] is False
    assert "GPUs per pod" in schema["properties"]["gpus"]["description"]


def test_outside_a_repository_is_a_clear_error(tmp_path) -> None:
    result = gkr("render", cwd=tmp_path)
    assert result.returncode == 1 and "not inside a GKR repository" in result.stderr


def test_the_committed_tree_is_rendered_and_valid() -> None:
    """The repository's own jobs/: `gkr render --check` and `gkr validate` pass."""
    check = gkr("render", "--check", cwd=REPO)
    assert check.returncode == 0, check.stdout + check.stderr
    result = gkr("validate", cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_example_tree_covers_kinds_teams_clusters_accelerators() -> None:
    specs = [yaml.safe_load(p.read_text()) | {"team": p.parent.name}
             for p in sorted((REPO / "jobs").glob("*/*.yaml"))]
    assert len(specs) >= 6
    assert {s["kind"] for s in specs} == {"rayjob", "raycluster", "job"}
    assert len({s["team"] for s in specs}) >= 2 and len({s["cluster"] for s in specs}) >= 2
    assert len({s.get("accelerator") for s in specs} - {None}) >= 3


def test_many_specs_render_in_parallel_exactly_as_one_by_one(repo, spec, monkeypatch) -> None:
    """Above the threshold, cold renders fan out to forked workers; the bytes are the same."""
    import generator.render as tree_module

    for i in range(12):
        repo.write_spec(f"many-{i:02d}", spec(pods=1 + i % 3, env={"I": str(i)}))
    repo.write_spec("broken", spec(gpus=99))
    monkeypatch.setattr(tree_module, "PARALLEL_THRESHOLD", 4)
    with pytest.raises(InvalidInput) as raised:  # problems travel back from the workers
        render_tree(repo.root, use_cache=False)
    assert [p.file for p in raised.value.problems] == ["jobs/ml/broken.yaml"]
    (repo.root / "jobs/ml/broken.yaml").unlink()
    parallel = render_tree(repo.root, use_cache=False).files
    monkeypatch.setattr(tree_module, "PARALLEL_THRESHOLD", 10_000)
    assert render_tree(repo.root, use_cache=False).files == parallel
    assert len([p for p in parallel if "/jobs/team-ml/many-" in p]) == 12
