"""Per-cluster platform objects in each overlay (namespaces, RBAC, Kueue, image pre-cache,
the GPU NICs' networks) and the per-accelerator NCCL installer components the overlays
include."""

from __future__ import annotations

from typing import Any

from generator.admission import Allowance, admission_policy, allowance, team_enforce_level
from generator.catalog import Cluster
from generator.errors import InvalidInput, Problem
from generator.manifests import render_documents, render_template
from generator.paths import HEADER, component_dir, jobs_dir, overlay_dir
from generator.platform.context import CATALOG_SOURCE, PlatformContext
from generator.platform.networks import network_objects
from generator.platform.warden import STRESS_IMAGE
from generator.precache import Precache
from generator.yamlio import dump_documents


def platform_dir(cluster: Cluster) -> str:
    return f"{overlay_dir(cluster.name)}/platform"


def produce_overlays(ctx: PlatformContext) -> None:
    _check_ray_operator(ctx)
    for cluster in ctx.catalog.clusters.values():
        source = f"clusters/{cluster.name}.yaml"
        folder = platform_dir(cluster)
        ctx.add(f"{folder}/namespaces.yaml", _namespaces(ctx, cluster), source)
        ctx.add(f"{folder}/admission.yaml", _admission(ctx, cluster), CATALOG_SOURCE)
        ctx.add(f"{folder}/rbac.yaml", render_documents("platform/rbac.yaml.j2", cluster=cluster),
                source)
        ctx.add(f"{folder}/kueue.yaml", _kueue(ctx, cluster), source)
        ctx.tree.deferred[f"{folder}/image-precache.yaml"] = _precache(ctx, cluster)
        if networks := network_objects(ctx.catalog, cluster):
            ctx.add(f"{folder}/networks.yaml", networks, CATALOG_SOURCE)
        ctx.tree.files[f"{jobs_dir(cluster.name)}/{JOBS_KEEP}"] = _jobs_keep(cluster)


JOBS_KEEP = "_folder.yaml"


def _jobs_keep(cluster: Cluster) -> str:
    """A document-free file that keeps the jobs folder, which Argo CD's jobs Application
    syncs, present on a cluster without jobs (Argo CD refuses a missing path)."""
    return (HEADER.format(source=f"clusters/{cluster.name}.yaml")
            + f"# Argo CD's Application {cluster.name}-jobs syncs this folder as plain manifests:"
            "\n# each job's file, rendered whole by `gkr render`, in its namespace's folder.\n")


def _check_ray_operator(ctx: PlatformContext) -> None:
    """Jobs' NetworkPolicies admit the KubeRay operator from the catalog's namespace for it:
    it must be the one the add-on runs in, or every RayJob's status stops."""
    addon = ctx.addons.addons.get("kuberay-operator")
    wanted = ctx.catalog.platform.ray_operator_namespace
    if addon is not None and addon.namespace != wanted:
        raise InvalidInput([Problem("platform/catalog/gke.yaml", None, "ray_operator_namespace",
                                    f"{wanted!r}, but the kuberay-operator add-on runs in "
                                    f"{addon.namespace!r}: they must be equal")])


def allowances(ctx: PlatformContext, cluster: Cluster) -> dict[str, Allowance]:
    """What pods may do on each accelerator the cluster offers, by gke-accelerator value."""
    node_dir = ctx.catalog.platform.telemetry.node_dir
    return {a.gke_accelerator: allowance(a, node_dir) for a in ctx.offered(cluster).values()}


def team_pod_security(ctx: PlatformContext, cluster: Cluster) -> dict[str, str]:
    """The Pod Security labels of the cluster's team namespaces: the configured levels, but
    `enforce` is `privileged` where the catalog's GPU pods go beyond `baseline` (host paths,
    NET_ADMIN sidecars), which then the ValidatingAdmissionPolicy holds instead
    (generator.admission says why)."""
    levels = {str(mode): level for mode, level in ctx.addons.namespaces.pod_security.items()}
    if team_enforce_level(allowances(ctx, cluster).values()) == "privileged":
        levels["enforce"] = "privileged"
    return levels


def _namespaces(ctx: PlatformContext, cluster: Cluster) -> list[dict[str, Any]]:
    spaces = ctx.addons.namespaces
    return render_documents(
        "platform/namespaces.yaml.j2", cluster=cluster, system=spaces.system,
        system_pod_security=spaces.system_pod_security,
        pod_security=team_pod_security(ctx, cluster),
    )


def _admission(ctx: PlatformContext, cluster: Cluster) -> list[dict[str, Any]]:
    return admission_policy(ctx.catalog.platform.labels["accelerator"],
                            allowances(ctx, cluster),
                            [team.namespace for team in cluster.teams.values()])


def flavors(ctx: PlatformContext, cluster: Cluster) -> list[dict[str, Any]]:
    """One Kueue ResourceFlavor per node pool, matching the node selectors of rendered pods."""
    pool_label = ctx.catalog.platform.labels["node_pool"]
    heads = {"name": cluster.head_pool.name, "gpus": False,
             "node_labels": {pool_label: cluster.head_pool.name}}
    accelerators = [
        {"name": name.lower(), "gpus": True, "node_labels": {pool_label: pool.node_pool}}
        for name, pool in sorted(cluster.accelerators.items())
    ]
    return [heads, *accelerators]


def _kueue(ctx: PlatformContext, cluster: Cluster) -> list[dict[str, Any]]:
    return render_documents(
        "platform/kueue.yaml.j2", cluster=cluster, kueue=ctx.addons.kueue,
        flavors=flavors(ctx, cluster), gpu_resource=ctx.catalog.platform.gpu_resource,
        namespaces=sorted(team.namespace for team in cluster.teams.values()),
    )


def _precache(ctx: PlatformContext, cluster: Cluster) -> Precache:
    """The cluster's pre-cache DaemonSet, which warms its images once its jobs are known."""
    offered = list(ctx.offered(cluster).values())
    precache = ctx.addons.precache
    daemonset = render_template(
        "platform/precache.yaml.j2", precache=precache, namespace=ctx.addons.namespaces.system,
        keep_alive_image=ctx.image(precache.keep_alive_image, "precache.keep_alive_image"),
        accelerator_label=ctx.catalog.platform.labels["accelerator"],
        gke_accelerators=sorted({a.gke_accelerator for a in offered}),
        tolerations=ctx.gpu_tolerations(offered),
    )
    return Precache(daemonset, tuple(precache.warm_command), jobs_dir(cluster.name),
                    ctx.image(STRESS_IMAGE, "warden.settings.checks.stress"), CATALOG_SOURCE)


def produce_components(ctx: PlatformContext) -> None:
    """`kustomize/components/<accel>/`: the NCCL installer of accelerators with GPUDirect."""

    for name, accelerator in sorted(ctx.catalog.accelerators.items()):
        stack = accelerator.stack
        installer = ctx.addons.nccl_installers.get(stack) if stack else None
        if installer is None:
            continue
        folder = component_dir(name)
        daemonset = render_template(
            "platform/nccl_installer.yaml.j2", accelerator_name=name, accelerator=accelerator,
            installer=installer,
            installer_image=ctx.image(installer.image, f"nccl_installers.{stack}.image"),
            pause_image=ctx.image(ctx.addons.pause_image, "pause_image"),
            accelerator_label=ctx.catalog.platform.labels["accelerator"],
            tolerations=ctx.gpu_tolerations([accelerator]),
        )
        ctx.add(f"{folder}/nccl-installer.yaml", [daemonset], "platform/catalog/")
        component = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                     "resources": ["nccl-installer.yaml"]}
        ctx.tree.files[f"{folder}/kustomization.yaml"] = (
            HEADER.format(source="platform/catalog/") + dump_documents([component]))
