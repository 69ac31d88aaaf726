"""The PATCH body formats of the Kubernetes API, as the API server applies them (test double).

* JSON merge patch (RFC 7386, `application/merge-patch+json`);
* strategic merge patch (`application/strategic-merge-patch+json`, built-in kinds only): maps
  merge, lists whose field has a `patchMergeKey` in the API types merge item by item on that
  key, `finalizers` merge as a set, other lists are replaced; the `$patch: replace|delete`
  directive is honoured and any other `$` directive is refused;
* JSON patch (RFC 6902, `application/json-patch+json`): add, remove, replace, move, copy, test.

Errors are `PatchError`; the server answers them as the real one does (422 Invalid).
"""

from __future__ import annotations

import copy
from typing import Any

# patchMergeKey of the list fields of the served built-in kinds (k8s.io/api core/v1 and
# meta/v1 types: Container, EnvVar, ContainerPort, VolumeMount, Volume, OwnerReference,
# PodCondition/NodeCondition, NodeAddress, LocalObjectReference).
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "ports": "containerPort", "volumeMounts": "mountPath", "volumes": "name",
    "ownerReferences": "uid", "conditions": "type", "addresses": "type",
    "imagePullSecrets": "name",
}
SET_LISTS = {"finalizers"}  # patchStrategy=merge on a list of strings: union


class PatchError(Exception):
    """A patch that cannot be applied to the object."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes' strategic merge patch over the merge keys of `MERGE_KEYS`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch", "merge")
    body = {k: v for k, v in patch.items() if k != "$patch"}
    _refuse_directives(body, directive)
    if directive == "replace":
        return copy.deepcopy(body)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in body.items():
        if value is None or (isinstance(value, dict) and value.get("$patch") == "delete"):
            merged.pop(key, None)
        elif isinstance(value, list):
            merged[key] = _merge_list(key, merged.get(key), value)
        else:
            merged[key] = strategic_merge_patch(merged.get(key), value)
    return merged


def _refuse_directives(body: dict[str, Any], directive: Any) -> None:
    unknown = sorted(k for k in body if k.startswith("$"))
    if directive not in ("merge", "replace"):
        unknown.insert(0, f"$patch: {directive}")
    if unknown:
        raise PatchError(f"unsupported strategic merge patch directive(s): {', '.join(unknown)}")


def _merge_list(field: str, current: Any, items: list[Any]) -> list[Any]:
    current = current if isinstance(current, list) else []
    if field in SET_LISTS:
        return current + [item for item in items if item not in current]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) for item in items):
        return copy.deepcopy(items)
    merged = copy.deepcopy(current)
    for item in items:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        found = next((i for i, old in enumerate(merged) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            merged = [old for old in merged if old.get(key) != item[key]]
        elif found is None:
            merged.append(strategic_merge_patch({}, item))
        else:
            merged[found] = strategic_merge_patch(merged[found], item)
    return merged


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of the target; the first failing operation fails the whole patch."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        document = _operate(document, operation)
    return document


def _operate(document: Any, operation: Any) -> Any:
    op = operation.get("op") if isinstance(operation, dict) else None
    path = _pointer(operation, "path")
    if op == "add":
        return _add(document, path, copy.deepcopy(_value(operation)))
    if op == "remove":
        return _remove(document, path)[0]
    if op == "replace":
        return _add(_remove(document, path)[0], path, copy.deepcopy(_value(operation)))
    if op in ("move", "copy"):
        source = _pointer(operation, "from")
        value = copy.deepcopy(_resolve(document, source))
        if op == "move":
            document = _remove(document, source)[0]
        return _add(document, path, value)
    if op == "test":
        if _resolve(document, path) != _value(operation):
            raise PatchError(f"testing value {operation.get('path')} failed")
        return document
    raise PatchError(f"unexpected kind of JSON patch operation: {op!r}")


def _value(operation: dict[str, Any]) -> Any:
    if "value" not in operation:
        raise PatchError(f"{operation['op']} operation does not have a value")
    return operation["value"]


def _pointer(operation: Any, member: str) -> list[str]:
    """RFC 6901: '/a/b~1c' -> ['a', 'b/c']."""
    pointer = operation.get(member) if isinstance(operation, dict) else None
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise PatchError(f"JSON patch operation is missing a valid {member!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer.split("/")[1:]]


def _resolve(document: Any, path: list[str]) -> Any:
    for part in path:
        document = _child(document, part)
    return document


def _child(container: Any, part: str) -> Any:
    if isinstance(container, dict) and part in container:
        return container[part]
    if isinstance(container, list):
        return container[_index(container, part, len(container) - 1)]
    raise PatchError(f"doc is missing path: {part}")


def _index(items: list[Any], part: str, last: int) -> int:
    if not part.isdigit() or int(part) > last:
        raise PatchError(f"invalid index into array: {part}")
    return int(part)


def _add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _resolve(document, path[:-1])
    last = path[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else _index(parent, last, len(parent)), value)
    else:
        raise PatchError(f"doc is missing path: {'/'.join(path)}")
    return document


def _remove(document: Any, path: list[str]) -> tuple[Any, Any]:
    if not path:
        raise PatchError("cannot remove the whole document")
    parent = _resolve(document, path[:-1])
    removed = _child(parent, path[-1])
    if isinstance(parent, dict):
        del parent[path[-1]]
    else:
        del parent[int(path[-1])]
    return document, removed
