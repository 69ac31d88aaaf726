"""Argo CD: the app of apps, and per cluster one Application per add-on chart, one for the
cluster's overlay, one for its jobs and one for Warden."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.addons import ADDONS_FILE, Addon, Wave
from generator.catalog import Cluster
from generator.manifests import render_documents, render_template
from generator.paths import ARGOCD_ROOT, WARDEN_PATH, jobs_dir, overlay_dir
from generator.platform.context import PlatformContext
from generator.platform.grafana import grafana_values
from generator.platform.monitoring import selected_labels, with_labels, with_pod_monitors
from generator.platform.telemetry import fluent_bit_values


@dataclass(frozen=True)
class GitApp:
    """An Application on a folder of this repository."""

    name: str
    path: str
    wave: Wave
    plain: bool = False  # a folder of plain manifests (recursive), not a kustomization


def produce_argocd(ctx: PlatformContext) -> None:
    argocd = ctx.addons.argocd
    ctx.add(f"{ARGOCD_ROOT}/root.yaml", [render_template("platform/root.yaml.j2", argocd=argocd)])
    for name, cluster in ctx.catalog.clusters.items():
        git_apps = [GitApp("platform", overlay_dir(name), "config"),
                    GitApp("jobs", jobs_dir(name), "jobs", plain=True),
                    GitApp("warden", WARDEN_PATH, "services")]
        addons = dict(sorted(ctx.addons.addons.items()))
        documents = render_documents(
            "platform/applications.yaml.j2", cluster=cluster, argocd=argocd, addons=addons,
            values={key: helm_values(ctx, cluster, addon) for key, addon in addons.items()},
            git_apps=git_apps,
        )
        ctx.add(f"{ARGOCD_ROOT}/apps/{name}.yaml", documents,
                f"clusters/{name}.yaml and {ADDONS_FILE}")


def helm_values(ctx: PlatformContext, cluster: Cluster, addon: Addon) -> dict[str, Any]:
    """The add-on's Helm values on one cluster: GPU node add-ons tolerate its GPU nodes, the
    NCCL Inspector shipper gets its pipeline, monitors the labels Prometheus selects, the
    Prometheus its PodMonitors and Grafana its data sources and dashboards."""
    values = dict(addon.values)
    if addon.gpu_tolerations is not None:
        offered = list(ctx.offered(cluster).values())
        values[addon.gpu_tolerations] = ctx.gpu_tolerations(offered)
    if addon.ships_nccl_inspector:
        values |= fluent_bit_values(ctx, cluster)
    release = ctx.addons.warden.prometheus.addon  # the Prometheus of the platform
    if addon.monitor_labels is not None:
        labels = selected_labels(release, ctx.addons.addons[release])
        values = with_labels(values, addon.monitor_labels, labels)
    if addon.pod_monitors:
        values = with_pod_monitors(values, release, addon, cluster)
    if addon.grafana is not None:
        values = grafana_values(ctx, addon.grafana, values)
    return values
