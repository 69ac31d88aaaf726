"""Per-cluster platform objects in each overlay (namespaces, RBAC, Kueue, image pre-cache)
and the per-accelerator NCCL installer components the overlays include."""

from __future__ import annotations

from typing import Any

from generator.catalog import Cluster
from generator.manifests import render_documents, render_template
from generator.paths import HEADER, component_dir, jobs_dir, overlay_dir
from generator.platform.context import CATALOG_SOURCE, PlatformContext
from generator.yamlio import dump_documents


def platform_dir(cluster: Cluster) -> str:
    return f"{overlay_dir(cluster.name)}/platform"


def produce_overlays(ctx: PlatformContext) -> None:
    for cluster in ctx.catalog.clusters.values():
        source = f"clusters/{cluster.name}.yaml"
        folder = platform_dir(cluster)
        ctx.add(f"{folder}/namespaces.yaml", _namespaces(ctx, cluster), source)
        ctx.add(f"{folder}/rbac.yaml", render_documents("platform/rbac.yaml.j2", cluster=cluster),
                source)
        ctx.add(f"{folder}/kueue.yaml", _kueue(ctx, cluster), source)
        ctx.add(f"{folder}/image-precache.yaml", [_precache(ctx, cluster)], CATALOG_SOURCE)
        ctx.tree.files[f"{jobs_dir(cluster.name)}/{JOBS_KEEP}"] = _jobs_keep(cluster)


JOBS_KEEP = "_folder.yaml"


def _jobs_keep(cluster: Cluster) -> str:
    """A document-free file that keeps the jobs folder, which Argo CD's jobs Application
    syncs, present on a cluster without jobs (Argo CD refuses a missing path)."""
    return (HEADER.format(source=f"clusters/{cluster.name}.yaml")
            + f"# Argo CD's Application {cluster.name}-jobs syncs this folder as plain manifests:"
            "\n# each job's file, rendered whole by `gkr render`, in its namespace's folder.\n")


def _namespaces(ctx: PlatformContext, cluster: Cluster) -> list[dict[str, Any]]:
    spaces = ctx.addons.namespaces
    return render_documents(
        "platform/namespaces.yaml.j2", cluster=cluster, system=spaces.system,
        system_pod_security=spaces.system_pod_security, pod_security=spaces.pod_security,
    )


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


def _precache(ctx: PlatformContext, cluster: Cluster) -> dict[str, Any]:
    offered = list(ctx.offered(cluster).values())
    precache = ctx.addons.precache
    return render_template(
        "platform/precache.yaml.j2", precache=precache, namespace=ctx.addons.namespaces.system,
        images=dict(sorted(ctx.catalog.images.items())),
        keep_alive_image=ctx.catalog.images[precache.keep_alive_image],
        accelerator_label=ctx.catalog.platform.labels["accelerator"],
        gke_accelerators=sorted({a.gke_accelerator for a in offered}),
        tolerations=ctx.gpu_tolerations(offered),
    )


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
            installer=installer, pause_image=ctx.addons.pause_image,
            accelerator_label=ctx.catalog.platform.labels["accelerator"],
            tolerations=ctx.gpu_tolerations([accelerator]),
        )
        ctx.add(f"{folder}/nccl-installer.yaml", [daemonset], "platform/catalog/")
        component = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                     "resources": ["nccl-installer.yaml"]}
        ctx.tree.files[f"{folder}/kustomization.yaml"] = (
            HEADER.format(source="platform/catalog/") + dump_documents([component]))
