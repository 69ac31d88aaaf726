"""The identity contract: what `gkr render` writes into a pod is what the runtime reads back."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from runtime.identity import ENV_FIELDS, Env, Identity, JobKind, Label, Workload, selector

GOLDEN = Path(__file__).parent / "generator/golden/rayjob-h200.yaml"
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)


def _worker_env() -> dict[str, str]:
    (rayjob,) = (d for d in yaml.safe_load_all(GOLDEN.read_text()) if d["kind"] == "RayJob")
    pod = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    env = pod["spec"]["containers"][0]["env"]
    # Downward-API and Secret values stand in as `<field path>` and `<secret/key>`: the
    # kubelet fills them in.
    return {e["name"]: e.get("value") or _stand_in(e["valueFrom"]) for e in env}


def _stand_in(source: dict[str, dict[str, str]]) -> str:
    if "fieldRef" in source:
        return f"<{source['fieldRef']['fieldPath']}>"
    return f"<{source['secretKeyRef']['name']}/{source['secretKeyRef']['key']}>"


def test_a_rendered_worker_knows_its_job_team_cluster_and_role() -> None:
    identity = Identity.from_env(_worker_env(), run="r1", rank=3)
    assert (identity.job, identity.kind, identity.team, identity.namespace, identity.role) == (
        "rayjob-h200", "rayjob", "ml", "team-ml", "worker")
    assert identity.cluster and identity.pod == "<metadata.name>"
    assert identity.node == "<spec.nodeName>"
    assert (identity.run, identity.rank) == ("r1", 3)


def test_every_identity_variable_has_a_field_and_the_labels_select_the_job() -> None:
    assert set(ENV_FIELDS.values()) <= set(Identity.__dataclass_fields__)
    workload = Workload("c", "team-a", "a", "j", JobKind.JOB)
    assert workload.labels()[Label.JOB] == "j"
    assert selector(job="j", role="worker") == f"{Label.JOB}=j,{Label.ROLE}=worker"


@given(names, names, names, names, st.sampled_from(list(JobKind)))
def test_workload_env_round_trips_through_identity(cluster: str, namespace: str, team: str,
                                                   job: str, kind: JobKind) -> None:
    workload = Workload(cluster, namespace, team, job, kind)
    identity = Identity.from_env(workload.env())
    assert (identity.cluster, identity.namespace, identity.team, identity.job, identity.kind) == (
        cluster, namespace, team, job, str(kind))
    assert identity.rank == -1 and identity.row()["job"] == job
    assert Env.JOB in workload.env()
