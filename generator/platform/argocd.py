"""Argo CD: the app of apps, and per cluster one Application per add-on chart, one for the
cluster's overlay and one for Warden."""

from __future__ import annotations

from dataclasses import dataclass

from generator.manifests import render_documents, render_template
from generator.platform.addons import ADDONS_FILE, Wave
from generator.platform.context import PlatformContext

ARGOCD_ROOT = "platform/argocd"
WARDEN_PATH = "platform/warden"


@dataclass(frozen=True)
class GitApp:
    """An Application on a folder of this repository."""

    name: str
    path: str
    wave: Wave


def produce_argocd(ctx: PlatformContext) -> None:
    argocd = ctx.addons.argocd
    ctx.add(f"{ARGOCD_ROOT}/root.yaml", [render_template("platform/root.yaml.j2", argocd=argocd)])
    for name, cluster in ctx.catalog.clusters.items():
        git_apps = [GitApp("platform", f"kustomize/overlays/{name}", "config"),
                    GitApp("warden", WARDEN_PATH, "services")]
        documents = render_documents(
            "platform/applications.yaml.j2", cluster=cluster, argocd=argocd,
            addons=dict(sorted(ctx.addons.addons.items())), git_apps=git_apps,
        )
        ctx.add(f"{ARGOCD_ROOT}/apps/{name}.yaml", documents,
                f"clusters/{name}.yaml and {ADDONS_FILE}")
