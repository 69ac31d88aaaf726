"""`gkr submit` reads its spec once and resolves it once, whatever it does with it (a dry run,
an apply against the Kubernetes API double, a shipped working directory); and the cluster
layer's `submit` is one call that returns what it did."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import generator.cluster.prepare as prepare_module
import generator.resolve
import generator.specs
from generator.cluster import JobsRequest, SpecFlags, SubmitMode, SubmitRequest, submit_job
from generator.errors import BadRequest
from tests.cli.conftest import NS, SUBMIT, gkr

COUNTED = {"resolve": (generator.resolve, prepare_module),
           "load_spec": (generator.specs, prepare_module),
           "spec_from_flags": (generator.specs, prepare_module)}


@pytest.fixture
def calls(monkeypatch) -> Counter[str]:
    """How often each spec-reading and resolving function ran, wherever it was called from."""
    counted: Counter[str] = Counter()
    for name, modules in COUNTED.items():
        original = getattr(modules[0], name)

        def wrapper(*args, _name=name, _original=original, **kwargs):
            counted[_name] += 1
            return _original(*args, **kwargs)

        for module in modules:
            monkeypatch.setattr(module, name, wrapper)
    return counted


@pytest.fixture
def code(repo) -> Path:
    folder = repo / "code"
    folder.mkdir()
    (folder / "train.py").write_text("print('hi')\n")
    return folder


def test_a_dry_run_with_a_working_dir_resolves_once(repo, calls, code) -> None:
    shown = gkr(*SUBMIT, "--working-dir", str(code), "--dry-run")
    assert shown.code == 0, shown.err
    assert calls == {"spec_from_flags": 1, "resolve": 1}
    assert "file://" in shown.out  # resolved with the code store URI the archive will have


def test_a_submit_to_the_api_resolves_once_and_uploads_after_the_checks(repo, apiserver, calls,
                                                                        code) -> None:
    shown = gkr(*SUBMIT, "--working-dir", str(code))
    assert shown.code == 0, shown.err
    assert calls == {"spec_from_flags": 1, "resolve": 1}
    runtime_env = apiserver.get("ray.io", "rayjobs", NS, "train-a")["spec"]["runtimeEnvYAML"]
    uri = json.loads(runtime_env)["working_dir"]
    assert Path(uri.removeprefix("file://")).is_file()  # uploaded, at the URI it resolved with


def test_a_spec_file_is_read_once(repo, apiserver, calls) -> None:
    shown = gkr("submit", "-f", "jobs/llm/llm-dev.yaml", "--cluster", "usc1-prod",
                "--accelerators", "H200")
    assert shown.code == 0, shown.err
    assert calls == {"load_spec": 1, "resolve": 1}


def test_a_refused_apply_uploads_nothing(repo, apiserver, code, tmp_path) -> None:
    """The Argo CD guard runs before the archive goes to the code store."""
    shown = gkr("submit", "-f", "jobs/llm/llm-pretrain-7b.yaml", "--working-dir", str(code))
    assert shown.code == 1 and "managed by Argo CD" in shown.err
    assert not list((tmp_path / "code-store").glob("*.zip"))


def test_the_cluster_layer_returns_what_a_submit_did(repo, apiserver) -> None:
    flags = SpecFlags(name="train-b", kind="rayjob", cluster="usc1-prod", namespace=NS,
                      owner="tester@reve.ai", pods=1, accelerator="H200", image="trainer",
                      cmd="python -m runtime.train cfg.yaml")
    dry = submit_job(SubmitRequest(JobsRequest(repo, flags), SubmitMode.DRY_RUN))
    assert [job.name for job in dry.jobs] == ["train-b"] and not dry.applied
    assert dry.manifests[0][0]["kind"] == "RayJob" and not apiserver.requests
    done = submit_job(SubmitRequest(JobsRequest(repo, flags)))
    assert [obj["metadata"]["resourceVersion"] for obj in done.applied]
    with pytest.raises(BadRequest, match="--branch and --base go with --gitops"):
        SubmitRequest(JobsRequest(repo, flags), branch="b")
