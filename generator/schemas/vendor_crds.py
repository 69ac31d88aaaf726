"""Vendor CRD validation schemas into the package so `gkr validate` needs no network.

Usage: python -m generator.schemas.vendor_crds SRC_DIR
Reads every upstream CRD YAML under SRC_DIR and writes, per served version, its
openAPIV3Schema (descriptions stripped to keep the package small) to
crds/<group>_<version>_<Kind>.json. The upstream files and versions are listed in
crds/SOURCES.md (KubeRay v1.7.0, Kueue v0.19.2, Argo CD v3.5.1, Altinity clickhouse-operator
0.25.6, GKE's networking.gke.io; all Apache-2.0).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).parent / "crds"


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def vendor(src: Path) -> list[Path]:
    written = []
    for path in sorted(src.rglob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served", True):
                continue
            schema = _strip_descriptions(version["schema"]["openAPIV3Schema"])
            target = OUT / f"{group}_{version['name']}_{kind}.json"
            target.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")))
            written.append(target)
    return written


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for target in vendor(Path(sys.argv[1])):
        print(target.relative_to(OUT.parent))
