"""`gkr submit` and `gkr delete` leave jobs Argo CD manages alone unless `--force`, and say
to use a pull request: Argo CD's selfHeal would undo a direct apply or delete."""

from __future__ import annotations

from generator.cluster.argocd import TRACKING_ANNOTATION, TRACKING_LABEL, tracking_app
from tests.cli.conftest import NS, SUBMIT, gkr

COMMITTED = "jobs/llm/llm-pretrain-7b.yaml"  # rendered in kustomize/overlays/usc1-prod


def test_submit_of_a_committed_spec_is_refused_without_force(repo, apiserver) -> None:
    refused = gkr("submit", "-f", COMMITTED)
    assert refused.code == 1 and "managed by Argo CD" in refused.err
    assert "kustomize/overlays/usc1-prod/jobs/team-llm/llm-pretrain-7b.yaml" in refused.err
    assert "pull request" in refused.err and "--force" in refused.err
    assert apiserver.get("ray.io", "rayjobs", NS, "llm-pretrain-7b") is None
    forced = gkr("submit", "-f", COMMITTED, "--force")
    assert forced.code == 0, forced.err
    assert apiserver.get("ray.io", "rayjobs", NS, "llm-pretrain-7b") is not None
    assert gkr("submit", "-f", COMMITTED, "--dry-run").code == 0  # changes nothing


def test_delete_of_a_committed_job_is_refused_without_force(repo, apiserver) -> None:
    gkr("submit", "-f", COMMITTED, "--force")
    refused = gkr("delete", "llm-pretrain-7b")
    assert refused.code == 1 and "managed by Argo CD" in refused.err
    assert "delete jobs/<team>/llm-pretrain-7b.yaml in a pull request" in refused.err
    assert apiserver.get("ray.io", "rayjobs", NS, "llm-pretrain-7b") is not None
    assert gkr("delete", "llm-pretrain-7b", "--force").code == 0
    assert apiserver.get("ray.io", "rayjobs", NS, "llm-pretrain-7b") is None


def test_a_live_object_with_argo_cd_tracking_is_refused(repo, apiserver) -> None:
    assert gkr(*SUBMIT).code == 0
    live = apiserver.get("ray.io", "rayjobs", NS, "train-a")
    live["metadata"].setdefault("annotations", {})[TRACKING_ANNOTATION] = \
        f"usc1-prod-jobs:ray.io/RayJob:{NS}/train-a"
    apiserver.put(live)
    for args in (SUBMIT, ["delete", "train-a", "--cluster", "usc1-prod", "-n", NS]):
        refused = gkr(*args)
        assert refused.code == 1 and "Argo CD application 'usc1-prod-jobs'" in refused.err
    assert gkr("delete", "train-a", "--cluster", "usc1-prod", "-n", NS, "--force").code == 0


def test_tracking_marks_of_both_argo_cd_methods() -> None:
    assert tracking_app({"metadata": {"annotations": {
        TRACKING_ANNOTATION: "apps:ray.io/RayJob:team-llm/a"}}}) == "apps"
    assert tracking_app({"metadata": {"labels": {TRACKING_LABEL: "apps"}}}) == "apps"
    assert tracking_app({"metadata": {"labels": {"app.kubernetes.io/managed-by": "gkr"}}}) \
        is None
