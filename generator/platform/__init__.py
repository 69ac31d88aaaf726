"""Platform as code: everything `gkr render` derives from the cluster catalog besides jobs.

Adding `clusters/<name>.yaml` and running `gkr render` yields the cluster's Terraform root,
its Argo CD Applications, the Kueue objects, namespaces, RBAC and telemetry store in its
overlay, and the per-accelerator NCCL installer components the overlay includes. Warden's
ConfigMap is rendered from the add-on catalog too.
"""

from __future__ import annotations

from generator.addons import Addons, load_addons
from generator.paths import ARGOCD_ROOT, CLUSTER_ROOTS, REGISTRY_ROOT, WARDEN_GENERATED
from generator.platform.argocd import produce_argocd
from generator.platform.context import PlatformContext
from generator.platform.overlay import produce_components, produce_overlays
from generator.platform.telemetry import produce_telemetry
from generator.platform.terraform import produce_terraform
from generator.platform.warden import produce_warden
from generator.tree import RenderContext, Tree

# Folders the platform producers write into (generator.paths.GENERATED_ROOTS lists them all).
PLATFORM_ROOTS = [ARGOCD_ROOT, CLUSTER_ROOTS, REGISTRY_ROOT, WARDEN_GENERATED]


def produce_platform(ctx: RenderContext, tree: Tree) -> None:
    """The tree.PRODUCERS entry: loads the add-on catalog once, then every platform part."""
    platform = PlatformContext(ctx.catalog, load_addons(ctx.root), tree)
    for produce in (produce_overlays, produce_telemetry, produce_components, produce_argocd,
                    produce_terraform, produce_warden):
        produce(platform)


__all__ = ["PLATFORM_ROOTS", "Addons", "load_addons", "produce_platform"]
