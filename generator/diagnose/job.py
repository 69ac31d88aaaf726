"""The in-cluster diagnosis: a Job in the team's namespace, with read-only access.

Four objects: a ServiceAccount; a Role that may only get, list and watch the namespace's pods
and their logs; its RoleBinding; and a Job whose pod runs `python -m runtime.crash BUNDLE --
AGENT...` as that ServiceAccount, with the telemetry reader's DSN (the `reader` user's
password from the telemetry Secret) and the agent's own Secret. The pod is built by the one
pod builder (runtime.pods) and checked by the policies every rendered job manifest passes;
nothing in it can push to git or create or change a workload, so the approval gate holds by
construction, whatever the agent does.
"""

from __future__ import annotations

import hashlib
from typing import Any

from generator.catalog import Agent, Catalog, Cluster
from generator.errors import BadRequest, CheckFailed
from generator.policies import pod_problems, rbac_problems
from generator.telemetry import DATABASE, HTTP_PORT, READER_USER
from generator.units import format_cpus
from runtime.identity import MANAGED_BY, Env, Label
from runtime.pods import ContainerPlan, PodPlan, build_pod

Json = dict[str, Any]
WORKSPACE = "/workspace"
READ_ONLY_RULES = [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                    "verbs": ["get", "list", "watch"]}]


def job_name(run: str) -> str:
    """A DNS-1123 name derived from the run id (which may be long)."""
    return "gkr-diagnose-" + hashlib.sha256(run.encode()).hexdigest()[:12]


def diagnosis_objects(catalog: Catalog, cluster: Cluster, namespace: str, run: str,
                      bundle_uri: str, command: list[str]) -> list[Json]:
    """ServiceAccount, Role, RoleBinding and Job of one diagnosis, checked."""
    agent = catalog.platform.agent
    name = job_name(run)
    labels = {MANAGED_BY[0]: MANAGED_BY[1], Label.JOB: name, Label.ROLE: "diagnose"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    objects: list[Json] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": READ_ONLY_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        _job(catalog, cluster, agent, meta, run, bundle_uri, command),
    ]
    check_objects(objects, cluster)
    return objects


def _job(catalog: Catalog, cluster: Cluster, agent: Agent, meta: Json, run: str,
         bundle_uri: str, command: list[str]) -> Json:
    image = catalog.images.get(agent.image)
    if image is None:
        raise BadRequest(f"agent.image {agent.image!r} is not in platform/catalog/images.yaml")
    argv = ["python", "-m", "runtime.crash", bundle_uri, "--workspace", WORKSPACE,
            "--timeout", str(agent.timeout_s), "--", *command]
    resources = {"cpu": format_cpus(agent.cpus), "memory": agent.memory}
    pod = build_pod(PodPlan(
        labels=meta["labels"], annotations={}, restart_never=True,
        node_selector={catalog.platform.labels["node_pool"]: cluster.head_pool.name},
        tolerations=[], volumes=[{"name": "workspace", "emptyDir": {}}],
        container=ContainerPlan(name="agent", image=image, command=argv, resources=resources,
                                working_dir=WORKSPACE, env=_env(catalog, cluster, meta, run),
                                volume_mounts=[{"name": "workspace", "mountPath": WORKSPACE}]),
    ))
    _as_service_account(pod["spec"], meta["name"], agent.secret)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": agent.timeout_s + 600,
                     "ttlSecondsAfterFinished": 86400, "template": pod}}


def _env(catalog: Catalog, cluster: Cluster, meta: Json, run: str) -> list[Json]:
    """The reader's telemetry DSN (its password first: the DSN refers to it as $(NAME)) and
    who the pod is."""
    telemetry = catalog.platform.telemetry
    password = {"name": telemetry.secret, "key": telemetry.reader_key, "optional": True}
    dsn = (f"http://{READER_USER}:$({Env.TELEMETRY_PASSWORD})@{telemetry.service_host}:"
           f"{HTTP_PORT}/{DATABASE}")
    return [{"name": Env.TELEMETRY_PASSWORD, "valueFrom": {"secretKeyRef": password}},
            {"name": Env.TELEMETRY_DSN, "value": dsn},
            {"name": Env.CLUSTER, "value": cluster.name},
            {"name": Env.NAMESPACE, "value": meta["namespace"]},
            {"name": Env.RUN, "value": run}]


def _as_service_account(spec: Json, account: str, secret: str | None) -> None:
    """The pod reads pods and logs as the diagnosis's ServiceAccount (so its token is
    mounted, unlike a training pod's), and gets the agent's Secret as its environment."""
    spec["serviceAccountName"] = account
    spec["automountServiceAccountToken"] = True
    if secret:
        container = spec["containers"][0]
        container["envFrom"] = [{"secretRef": {"name": secret, "optional": True}}]


def check_objects(objects: list[Json], cluster: Cluster) -> None:
    """The policies of every rendered job manifest, and a Role that can only read."""
    teams = {team.namespace for team in cluster.teams.values()}
    problems = []
    for document in objects:
        where = f"{document['kind']}/{document['metadata']['name']}"
        namespace = document["metadata"].get("namespace")
        if namespace not in teams:
            problems.append(f"{where}: namespace {namespace!r} is not a team namespace of "
                            f"{cluster.name} (allowed: {', '.join(sorted(teams))})")
        problems += [f"{where}: {p}" for p in rbac_problems(document)]
        if document["kind"] == "Job":
            pod = document["spec"]["template"]["spec"]
            problems += [f"{where}: {p}" for p in pod_problems(pod, None)]
    if problems:
        raise CheckFailed("the diagnosis Job breaks policy: " + "; ".join(problems))
