"""`gkr diloco keys SPEC`: a DiLoCo experiment's CURVE keys, made at deploy time and
delivered as Kubernetes Secrets, one per part, each on the part's own cluster and namespace
and holding only what that party needs (runtime.diloco.keys): the synchroniser's secret key
and the learners' public keys; a learner's secret key and the synchroniser's public key.

The keys never touch the repository or this machine's disk: they are made in memory and
sent to the API servers. The rendered pods mount the Secrets (generator.pods.key_volumes)
under the names `generator.experiments.key_secret` gives. Existing Secrets are left alone
unless `rotate`: then every part gets new keys (a rotation replaces them all, as a learner's
old key must not outlive the synchroniser's trust in it); the running pods keep the keys
they read at start, so the experiment is restarted afterwards (README, "DiLoCo keys").
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator.cluster.prepare import JobsRequest, prepare_jobs
from generator.errors import BadRequest
from generator.resolve import ResolvedJob
from runtime.diloco.keys import SYNCHRONISER, experiment_files
from runtime.identity import Label
from runtime.kube import Kube, Obj

Connect = Callable[[str], Kube]  # a kube context -> its connected cluster


@dataclass(frozen=True)
class KeySecret:
    """One part's Secret and the kube context of the cluster it goes to."""

    context: str
    manifest: Obj

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"]["namespace"])


def key_secrets(jobs: list[ResolvedJob]) -> list[KeySecret]:
    """New keys for an experiment's parts (the synchroniser first, as `resolve_all` gives
    them), as the Secrets to create."""
    _synchroniser, *learners = jobs
    files = experiment_files(job.workload.learner for job in learners)
    return [_secret(job, files[job.workload.learner or SYNCHRONISER]) for job in jobs]


def _secret(job: ResolvedJob, files: dict[str, str]) -> KeySecret:
    if job.key_secret is None:
        raise BadRequest(f"{job.name} is no part of a DiLoCo experiment")
    labels = {key: job.labels[key] for key in (Label.JOB, Label.RUN, Label.LEARNER, Label.TEAM)
              if job.labels.get(key)}
    manifest = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": job.key_secret, "namespace": job.namespace,
                             "labels": labels},
                "data": {name: base64.b64encode(text.encode()).decode()
                         for name, text in files.items()}}
    return KeySecret(job.cluster.kube_context, manifest)


def create_key_secrets(jobs: list[ResolvedJob], connect: Connect,
                       rotate: bool = False) -> list[KeySecret]:
    """Create every part's Secret. Every cluster is reached and checked before anything is
    written: without `rotate`, an existing Secret stops the command (BadRequest naming it)
    and nothing is written."""
    secrets = key_secrets(jobs)
    clusters = {context: connect(context) for context in {s.context for s in secrets}}
    existing = [s for s in secrets if _exists(clusters[s.context], s)]
    if existing and not rotate:
        names = ", ".join(f"{s.namespace}/{s.name} ({s.context})" for s in existing)
        raise BadRequest(f"keys exist already: {names}; --rotate replaces every part's keys "
                         "(then restart the experiment)")
    for secret in secrets:
        clusters[secret.context].apply(secret.manifest)
    return secrets


def _exists(api: Kube, secret: KeySecret) -> bool:
    kind = api.kind("v1", "Secret")
    return api.find(kind, secret.name, namespace=secret.namespace) is not None


def experiment_keys(root: Path, spec_file: Path, rotate: bool = False) -> list[KeySecret]:
    """`gkr diloco keys SPEC`: the experiment's parts resolved from its spec, then
    `create_key_secrets` on each part's cluster."""
    jobs = prepare_jobs(JobsRequest(root, spec_file=spec_file)).jobs
    if len(jobs) < 2:
        raise BadRequest(f"{spec_file} has no diloco section: no keys to make")
    return create_key_secrets(jobs, Kube.connect, rotate)
