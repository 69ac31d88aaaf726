"""The schemas of the kinds the Kubernetes API test double serves, as OpenAPI v3 schemas.

Built-in kinds come from the `kubernetes-validate` package's bundled v1.37 definitions (JSON
Schema 2020-12, made from Kubernetes' own OpenAPI); custom resources from the CRD schemas the
project vendors in generator/schemas/crds (KubeRay, Kueue, Argo CD). Both are turned back into
the OpenAPI v3 form a v1.37 server publishes: `#/components/schemas/...` references (wrapped in
`allOf` when the reference has siblings), one `type` instead of `[type, "null"]`, and a custom
resource's `metadata` pointing at ObjectMeta. A served kind with no vendored schema (Kueue's
Workload) gets one that keeps unknown fields.

`unknown_fields` is the server's strict field validation (`fieldValidation=Strict`, kubectl's
default): the paths of an object's fields its schema does not declare.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

from testing.doubles.kube_api import SERVED, Json

KUBERNETES = "v1.37.0-local"
CRD_DIR = Path(__file__).resolve().parents[2] / "generator" / "schemas" / "crds"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
REF = "#/components/schemas/"


@cache
def definitions() -> dict[str, Json]:
    """Every schema by name: Kubernetes' definitions and one per served custom resource kind."""
    schemas = {name: _openapi(schema) for name, schema in _kubernetes().items()}
    for name in set(_gvk_names().values()):
        schemas[name] = _without_type_enums(schemas[name])
    for (group, _), resource in SERVED.items():
        if not resource.builtin:
            for version in resource.versions:
                name = schema_name(group, version, resource.kind)
                schemas[name] = _custom_resource(group, version, resource.kind)
    return schemas


def schema_name(group: str, version: str, kind: str) -> str:
    """The name a v1.37 server gives a kind's schema (custom resources: reversed group)."""
    built_in = _gvk_names().get((group, version, kind))
    if built_in is not None:
        return built_in
    return ".".join([*reversed(group.split(".")), version, kind])


@cache
def _kubernetes() -> dict[str, Json]:
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / KUBERNETES
    found: dict[str, Json] = json.loads((folder / "_definitions.json").read_text())["$defs"]
    return found


@cache
def _gvk_names() -> dict[tuple[str, str, str], str]:
    """Built-in kinds' schema names; meta/v1 types (DeleteOptions...) list every group."""
    return {(g["group"], g["version"], g["kind"]): name for name, schema in _kubernetes().items()
            for g in schema.get("x-kubernetes-group-version-kind", [])
            if not name.startswith("io.k8s.apimachinery.pkg.apis.meta.v1.")}


def references(name: str) -> set[str]:
    """The schema names a schema needs, itself included (the transitive closure)."""
    found: set[str] = set()
    pending = [name]
    while pending:
        current = pending.pop()
        if current not in found:
            found.add(current)
            pending += _refs(definitions()[current])
    return found


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"].removeprefix(REF)] if isinstance(node.get("$ref"), str) else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


# ---- conversion --------------------------------------------------------------------------------
def _openapi(node: Any) -> Any:
    """JSON Schema 2020-12 (kubernetes-validate) -> the OpenAPI v3 schema it was made from."""
    if isinstance(node, list):
        return [_openapi(value) for value in node]
    if not isinstance(node, dict):
        return node
    out = {key: _openapi(value) for key, value in node.items() if key not in ("$schema", "$id")}
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        out["type"] = types[0] if len(types) == 1 else types
    if isinstance(out.get("$ref"), str):  # JSONSchemaProps has a *property* named $ref
        ref = {"$ref": REF + out.pop("$ref").rpartition("/")[2]}
        out = {"allOf": [ref], **out} if out else ref
    return out


def _without_type_enums(schema: Json) -> Json:
    """kubernetes-validate pins apiVersion and kind with enums that the server's schema lacks."""
    properties = {key: {k: v for k, v in value.items() if k != "enum"}
                  if key in ("apiVersion", "kind") else value
                  for key, value in schema.get("properties", {}).items()}
    return {**schema, "properties": properties}


def _custom_resource(group: str, version: str, kind: str) -> Json:
    path = CRD_DIR / f"{group}_{version}_{kind}.json"
    schema: Json = (json.loads(path.read_text()) if path.is_file() else
                    {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    properties = {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                  **schema.get("properties", {}),
                  "metadata": {"allOf": [{"$ref": REF + OBJECT_META}]}}
    return {**schema, "type": "object", "properties": properties,
            "x-kubernetes-group-version-kind": [
                {"group": group, "version": version, "kind": kind}]}


# ---- field validation ------------------------------------------------------------------------
class Item(NamedTuple):
    """A list item in a field path: its index, and its map keys when the list has them."""

    position: int
    keys: str  # `name="main"`, or "" for a list without x-kubernetes-list-map-keys


FieldPath = tuple[str | Item, ...]


def unknown_fields(group: str, version: str, kind: str, obj: Any) -> list[FieldPath]:
    """The fields of an object that its kind's schema does not declare."""
    return _unknown(definitions()[schema_name(group, version, kind)], obj, ())


def decoding_path(path: FieldPath) -> str:
    """`spec.containers[0].imagee`, as a strict decoding error names a field."""
    return "".join(f"[{p.position}]" if isinstance(p, Item) else f".{p}" for p in path)[1:]


def apply_path(path: FieldPath) -> str:
    """`.spec.containers[name="main"].imagee`, as server-side apply names a field."""
    return "".join((f"[{p.keys}]" if p.keys else f"[{p.position}]") if isinstance(p, Item)
                   else f".{p}" for p in path)


def prune(obj: Any, paths: list[FieldPath]) -> None:
    """Drop unknown fields, as the server does when it does not refuse them."""
    for path in paths:
        node = obj
        for part in path[:-1]:
            node = node[part.position] if isinstance(part, Item) else node[part]
        node.pop(path[-1], None)


def _resolve(schema: Json) -> Json:
    """A schema with its references followed (`$ref`, or `allOf` of one reference)."""
    while True:
        if isinstance(schema.get("$ref"), str):
            schema = definitions()[schema["$ref"].removeprefix(REF)]
        elif "allOf" in schema and "properties" not in schema:
            schema = {**{k: v for k, v in schema.items() if k != "allOf"},
                      **_resolve(schema["allOf"][0])}
        else:
            return schema


def _unknown(schema: Json, value: Any, path: FieldPath) -> list[FieldPath]:
    schema = _resolve(schema)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, list) and "items" in schema:
        keys = schema.get("x-kubernetes-list-map-keys", [])
        return [p for i, item in enumerate(value)
                for p in _unknown(schema["items"], item, (*path, _item(i, item, keys)))]
    if not isinstance(value, dict):
        return []
    properties = schema.get("properties")
    if properties is None:
        extra = schema.get("additionalProperties")
        if not isinstance(extra, dict):
            return []
        return [p for key, item in value.items() for p in _unknown(extra, item, (*path, key))]
    return [p for key, item in value.items()
            for p in ([(*path, key)] if key not in properties else
                      _unknown(properties[key], item, (*path, key)))]


def _item(index: int, item: Any, keys: list[str]) -> Item:
    if not keys or not isinstance(item, dict):
        return Item(index, "")
    return Item(index, ",".join(f"{k}={json.dumps(item.get(k))}" for k in keys))
