"""Field ownership of the Kubernetes API test double: server-side apply's managed fields.

As the server tracks it (https://kubernetes.io/docs/reference/using-api/server-side-apply/):
every write records which manager set which fields. An apply (`Apply` operation) conflicts with
another manager that owns a field it sets to a different value (409, unless forced: then it
takes the field), and removes the fields it applied before but no longer applies when no one
else owns them. Any other write (`Update`: create, patch, replace) takes the fields it changes
and never conflicts. The conflict message is the server's
(k8s.io/apimachinery/pkg/util/managedfields/internal/conflict.go).

Simplified: lists are atomic (owned whole), where the server merges lists with
`x-kubernetes-list-type: map|set` item by item; paths print as `.a.b`, without `[key="v"]`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from testing.doubles.kube_api import ApiError, Json

Path = tuple[str, ...]
# Never owned: identity and server-set metadata.
UNOWNED = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace"),
           ("metadata", "uid"), ("metadata", "resourceVersion"), ("metadata", "generation"),
           ("metadata", "creationTimestamp"), ("metadata", "managedFields")}


@dataclass
class Manager:
    """One entry of `metadata.managedFields`: who, how, and the fields (with values) owned."""

    name: str
    operation: str  # Apply or Update
    api_version: str
    fields: dict[Path, Any] = field(default_factory=dict)
    time: str = ""

    def entry(self) -> Json:
        return {"manager": self.name, "operation": self.operation,
                "apiVersion": self.api_version, "time": self.time, "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(self.fields)}

    def identity(self) -> str:
        """How a conflict names the manager: an updater with the version it wrote."""
        quoted = '"' + self.name.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return quoted if self.operation == "Apply" else f"{quoted} using {self.api_version}"


# By (manager, operation): an applier and an updater of the same name are two managers.
Managers = dict[tuple[str, str], Manager]


def leaves(value: Any, prefix: Path = ()) -> dict[Path, Any]:
    """The owned field paths of an object and their values (lists and empty maps are leaves)."""
    if isinstance(value, dict) and value:
        found: dict[Path, Any] = {}
        for key, item in value.items():
            found |= leaves(item, (*prefix, key))
        return {p: v for p, v in found.items() if p not in UNOWNED and p[:1] != ("status",)}
    return {prefix: value}


def apply(managers: Managers, name: str, api_version: str, current: Json, applied: Json,
          force: bool) -> list[Path]:
    """Record an apply; the paths the object loses (applied before, now unowned)."""
    fields = leaves(applied)
    found = leaves(current)
    key = (name, "Apply")
    clashes = sorted((manager.identity(), path) for other, manager in managers.items()
                     if other != key for path in manager.fields if path in fields
                     and path in found and found[path] != fields[path])
    if clashes and not force:
        raise conflict(clashes)
    before = managers[key].fields if key in managers else {}
    _take(managers, key, fields)
    managers[key] = Manager(name, "Apply", api_version, fields, _now())
    owned = {p for m in managers.values() for p in m.fields}
    _drop_empty(managers)
    return [path for path in before if path not in fields and path not in owned]


def update(managers: Managers, name: str, api_version: str, old: Json | None,
           new: Json) -> None:
    """Record a create, patch or replace: the manager takes the fields it changed."""
    found = leaves(new)
    previous = leaves(old or {})
    changed = {p: v for p, v in found.items() if previous.get(p, _MISSING) != v}
    for manager in managers.values():  # fields the write removed are no one's
        manager.fields = {p: found[p] for p in manager.fields if p in found}
    key = (name, "Update")
    if changed:
        _take(managers, key, changed)
        kept = managers[key].fields if key in managers else {}
        managers[key] = Manager(name, "Update", api_version, {**kept, **changed}, _now())
    _drop_empty(managers)


def entries(managers: Managers) -> list[Json]:
    return [manager.entry() for manager in managers.values()]


def conflict(clashes: list[tuple[str, Path]]) -> ApiError:
    """409 Conflict, with the message and causes the server gives an apply conflict."""
    causes = [{"type": "FieldManagerConflict", "message": f"conflict with {m}",
               "field": _show(p)} for m, p in clashes]
    if len(clashes) == 1:
        manager, path = clashes[0]
        message = f"Apply failed with 1 conflict: conflict with {manager}: {_show(path)}"
    else:
        lines: list[str] = []
        for manager in sorted({m for m, _ in clashes}):
            lines.append(f"conflicts with {manager}:")
            lines += [f"- {_show(p)}" for m, p in clashes if m == manager]
        message = f"Apply failed with {len(clashes)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


def remove(obj: Json, path: Path) -> None:
    """Delete a field, and the maps it leaves empty."""
    parents = [obj]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(parents) - 1, 0, -1):
        if not parents[depth]:
            parents[depth - 1].pop(path[depth - 1], None)


def _take(managers: Managers, key: tuple[str, str], fields: dict[Path, Any]) -> None:
    for other, manager in managers.items():
        if other != key:
            manager.fields = {p: v for p, v in manager.fields.items() if p not in fields}


def _drop_empty(managers: Managers) -> None:
    for gone in [key for key, manager in managers.items() if not manager.fields]:
        del managers[gone]


def _show(path: Path) -> str:
    return "".join(f".{key}" for key in path)


def _fields_v1(fields: dict[Path, Any]) -> Json:
    tree: Json = {}
    for path in fields:
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_MISSING = object()
