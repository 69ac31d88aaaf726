"""What every platform producer reads: the render context plus the add-on catalog."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.addons import ADDONS_FILE, Addons
from generator.catalog import IMAGES_FILE, Accelerator, Catalog, Cluster
from generator.errors import InvalidInput, Problem
from generator.tree import Tree
from runtime.identity import Taint

CATALOG_SOURCE = "the cluster catalog (clusters/, platform/catalog/)"


@dataclass(frozen=True)
class PlatformContext:
    catalog: Catalog
    addons: Addons
    tree: Tree

    def add(self, path: str, documents: list[dict[str, Any]], source: str = ADDONS_FILE) -> None:
        self.tree.add(path, documents, source)

    def image(self, name: str, field: str) -> str:
        """The catalog's reference for an image the add-on catalog names at `field`."""
        if name not in self.catalog.images:
            raise InvalidInput([Problem(ADDONS_FILE, None, field, (
                f"{name!r} is not an image of {IMAGES_FILE}: add it there (one source of "
                f"every image the tree names); known: {', '.join(sorted(self.catalog.images))}"))])
        return self.catalog.images[name]

    def offered(self, cluster: Cluster) -> dict[str, Accelerator]:
        """The accelerators a cluster offers, by name, in a stable order."""
        return {name: self.catalog.accelerators[name] for name in sorted(cluster.accelerators)}

    def gpu_tolerations(self, accelerators: list[Accelerator]) -> list[dict[str, Any]]:
        """Tolerations for node add-ons: each accelerator's taints, and any team reservation."""
        found: list[dict[str, Any]] = []
        for accelerator in accelerators:
            found += [t for t in accelerator.tolerations if t not in found]
        reserved = {"key": Taint.RESERVED_FOR, "operator": "Exists", "effect": "NoSchedule"}
        return [*found, reserved]
