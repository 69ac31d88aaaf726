"""`--cluster` and `--namespace` default as kubectl-ray's do: the job's spec in jobs/, then
the current kube context; the help says so, and says it only where it is true."""

from __future__ import annotations

import pytest
import yaml

from generator.cluster.target import Asked, find_cluster, find_target
from generator.errors import BadRequest
from runtime.kube import current_context
from tests.cli.conftest import CONTEXT, SUBMIT, gkr

EU = "gke_reve-train-eu_europe-west4_euw4-prod"  # euw4-prod's kube_context


def _kubeconfig(tmp_path, monkeypatch, current: str, namespace: str | None = None) -> None:
    context = {"cluster": "c", "user": "u"} | ({"namespace": namespace} if namespace else {})
    first = tmp_path / "kc-1"  # kubectl merges a path list; the first current-context wins
    first.write_text(yaml.safe_dump({"current-context": current}))
    second = tmp_path / "kc-2"
    second.write_text(yaml.safe_dump({"current-context": "other", "contexts": [
        {"name": current, "context": context}]}))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")


def test_the_spec_in_jobs_names_cluster_and_namespace(repo, monkeypatch, tmp_path) -> None:
    _kubeconfig(tmp_path, monkeypatch, CONTEXT, "team-vision")
    target = find_target(Asked(repo, "llm-dev"))  # jobs/llm/llm-dev.yaml: cluster euw4-prod
    assert (target.cluster.name, target.namespace) == ("euw4-prod", "team-llm")
    assert find_target(Asked(repo, "llm-dev", namespace="x")).namespace == "x"


def test_else_the_kube_context_names_them(repo, monkeypatch, tmp_path) -> None:
    _kubeconfig(tmp_path, monkeypatch, EU, "team-vision")
    assert current_context() is not None and current_context().namespace == "team-vision"
    target = find_target(Asked(repo, "not-a-committed-job"))
    assert (target.cluster.name, target.namespace) == ("euw4-prod", "team-vision")
    _kubeconfig(tmp_path, monkeypatch, EU, "default")  # not a team namespace: not a default
    with pytest.raises(BadRequest, match="--namespace is needed on euw4-prod"):
        find_target(Asked(repo, "not-a-committed-job"))


def test_with_neither_the_flag_is_asked_for(repo, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(BadRequest, match="--cluster is needed") as error:
        find_cluster(Asked(repo, "not-a-committed-job"))
    assert "euw4-prod, usc1-prod" in str(error.value)


def test_status_finds_the_namespace_of_a_committed_job(repo, apiserver) -> None:
    shown = gkr("status", "llm-pretrain-7b")  # usc1-prod and team-llm, from its spec
    assert shown.code == 1
    assert "no rayjob, raycluster or job named 'llm-pretrain-7b' in namespace team-llm" \
        in shown.err


def test_commands_work_on_the_current_context_alone(repo, apiserver) -> None:
    assert gkr(*SUBMIT).code == 0
    listed = gkr("list", "-o", "json")  # the kubeconfig's current context is usc1-prod's
    assert listed.code == 0 and '"name": "train-a"' in listed.out


def test_a_flags_only_submit_takes_the_kube_context(repo, monkeypatch, tmp_path) -> None:
    _kubeconfig(tmp_path, monkeypatch, CONTEXT, "team-vision")
    args = list(SUBMIT)
    for flag in ("--cluster", "--namespace"):
        at = args.index(flag)
        del args[at:at + 2]
    shown = gkr(*args, "--dry-run")
    assert shown.code == 0, shown.err
    assert "namespace: team-vision" in shown.out


@pytest.mark.parametrize("command", ["status", "logs", "delete", "shell", "cp", "port-forward"])
def test_help_states_the_defaults_that_apply(runner, command) -> None:
    from generator.cli import app

    shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    text = " ".join(shown.output.split())
    assert "every team namespace" not in text and "current kube context" in text
    listed = " ".join(runner.invoke(app, ["list", "--help"], env={"COLUMNS": "200"})
                      .output.split())
    assert "every team namespace" in listed
