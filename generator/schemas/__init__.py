"""Schemas of every kind GKR renders: Kubernetes OpenAPI (from kubernetes-validate's bundled
strict JSON schemas) and CRDs (KubeRay, Kueue, Argo CD, the Altinity ClickHouse operator,
GKE's multi-network objects; vendored in crds/).

Validators are compiled once per kind with jsonschema-rs (Rust; ~1 µs per manifest).
CRD schemas are made strict (unknown fields refused) the way the API server prunes them,
so that a misspelt field in a template fails here instead of vanishing in the cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema_rs

CRD_DIR = Path(__file__).parent / "crds"


@dataclass(frozen=True, order=True)
class SchemaError:
    """One schema violation: the field path inside the manifest and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(root)'}: {self.message}"


class UnknownKind(LookupError):
    """No schema is known for an apiVersion/kind."""


def validate(manifest: dict[str, Any], kubernetes_version: str) -> list[SchemaError]:
    """Every violation of the manifest's schema, sorted by path."""
    api_version, kind = manifest.get("apiVersion", ""), manifest.get("kind", "")
    validator = _validator(api_version, kind, _minor(kubernetes_version))
    return sorted(
        SchemaError(".".join(str(p) for p in error.instance_path), error.message)
        for error in validator.iter_errors(manifest)
    )


def _minor(version: str) -> str:
    major, minor, *_ = version.split(".")
    return f"{major}.{minor}.0"


@cache
def _validator(api_version: str, kind: str, version: str) -> Any:
    group, _, api = api_version.rpartition("/")
    crd = CRD_DIR / f"{group}_{api}_{kind}.json"
    if crd.is_file():
        return jsonschema_rs.validator_for(_strict(json.loads(crd.read_text())))
    return jsonschema_rs.validator_for(_kubernetes_schema(group, api, kind, version))


def _kubernetes_schema(group: str, api: str, kind: str, version: str) -> dict[str, Any]:
    # kubernetes-validate names files <kind>-<group's first label>-<version>.json.
    prefix = f"{group.split('.')[0]}-" if group else ""
    folder = _schema_root() / f"v{version}-local-strict"
    path = folder / f"{kind.lower()}-{prefix}{api}.json"
    if not path.is_file():
        raise UnknownKind(f"no schema for {group + '/' if group else ''}{api} {kind}")
    schema = _inline_refs(json.loads(path.read_text()))
    schema["$defs"] = _definitions(str(folder))
    return schema


def _schema_root() -> Path:
    return Path(str(resources.files("kubernetes_validate") / "kubernetes-json-schema"))


@cache
def _definitions(folder: str) -> dict[str, Any]:
    return _inline_refs(json.loads((Path(folder) / "_definitions.json").read_text())["$defs"])


def _inline_refs(node: Any) -> Any:
    """Point the bundle's cross-file refs at the local $defs."""
    if isinstance(node, dict):
        return {
            key: value.replace("/api/_definitions.json#", "#")
            if key == "$ref" and isinstance(value, str) else _inline_refs(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_inline_refs(value) for value in node]
    return node


def _strict(node: Any) -> Any:
    """Refuse unknown fields wherever the CRD lists properties and does not keep unknowns."""
    if isinstance(node, list):
        return [_strict(value) for value in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out
