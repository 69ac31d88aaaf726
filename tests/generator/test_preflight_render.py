"""The preflight gate as the generator renders it: a RayJob's entrypoint runs the gate, the
head carries its settings and the cmd, and the tree Argo CD syncs and the manifests
`gkr submit` applies hold the same gate (issue 26 item 5)."""

from __future__ import annotations

import json
from typing import Any

from generator.catalog import Catalog
from generator.cluster import JobsRequest, prepare_jobs
from generator.render import render_tree
from runtime.identity import Env
from runtime.preflight.config import load_gate

JOB_FILE = "kustomize/overlays/all-accelerators/jobs/team-ml/{}.yaml"
GATE = "python -m runtime.preflight.gate"


def head_env(rayjob: dict[str, Any]) -> dict[str, str]:
    """The head's variables as written (its rendered values double every `$` for the
    kubelet, generator.pods.literal_env)."""
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    return {e["name"]: e["value"].replace("$$", "$") for e in head["containers"][0]["env"]
            if "value" in e}


def worker_env(rayjob: dict[str, Any]) -> dict[str, str]:
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    return {e["name"]: e["value"] for e in worker["containers"][0]["env"] if "value" in e}


def test_argo_synced_and_submitted_rayjobs_run_the_same_gate(repo, spec) -> None:
    path = repo.write_spec("train", spec(preflight={"on_failure": "retry", "attempts": 2,
                                                    "replacement_timeout": "10m"}))
    synced, _policy = render_tree(repo.root, use_cache=False).manifests[JOB_FILE.format("train")]
    catalog = Catalog(repo.root)
    submitted = prepare_jobs(JobsRequest(repo.root, spec_file=path)).manifests[0][0]
    assert submitted == synced
    assert synced["spec"]["entrypoint"] == GATE
    env = head_env(synced)
    assert env[Env.ENTRYPOINT] == spec()["cmd"]
    gate = load_gate(env[Env.PREFLIGHT_GATE])
    h200 = catalog.accelerators["H200"]
    assert gate.pods == 2 and gate.min_busbw_gbps == h200.preflight.min_busbw_gbps
    assert gate.message_mib == h200.preflight.message_mib and gate.backend == "nccl"
    assert gate.policy.on_failure == "retry" and gate.policy.attempts == 2
    assert gate.policy.replacement_timeout_s == 600
    # Each pod checks the variables its own container gets from the catalog.
    assert gate.checks.gpus == 8
    assert gate.checks.transport_env.items() <= worker_env(synced).items()
    assert Env.PREFLIGHT_GATE not in worker_env(synced)


def test_a_cpu_rayjob_is_gated_without_a_threshold_and_teardown_tries_once(repo, spec) -> None:
    repo.write_spec("cpu", spec(accelerator=None, pods=1, preflight={"attempts": 5}))
    rayjob, _policy = render_tree(repo.root, use_cache=False).manifests[JOB_FILE.format("cpu")]
    gate = json.loads(head_env(rayjob)[Env.PREFLIGHT_GATE])
    assert gate["checks"] == {"gpus": 0} and "min_busbw_gbps" not in gate
    assert gate["policy"] == {"on_failure": "teardown", "attempts": 1,
                              "replacement_timeout_s": 1800}


def test_a_spec_may_turn_the_gate_off(repo, spec) -> None:
    repo.write_spec("ungated", spec(preflight={"enabled": False}))
    rayjob, _policy = render_tree(repo.root, use_cache=False).manifests[JOB_FILE.format("ungated")]
    assert rayjob["spec"]["entrypoint"] == spec()["cmd"]
    assert not {Env.PREFLIGHT_GATE, Env.ENTRYPOINT} & head_env(rayjob).keys()


def test_other_kinds_are_not_gated(repo, spec) -> None:
    repo.write_spec("plain", spec(kind="job", pods=1))
    job, _policy = render_tree(repo.root, use_cache=False).manifests[JOB_FILE.format("plain")]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c", spec()["cmd"]]
    assert Env.PREFLIGHT_GATE not in {e["name"] for e in container["env"]}
