"""Server-side printing: the `Table` (meta.k8s.io/v1) a server answers when a client asks for it.

kubectl's human-readable `get` sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`
and prints the columns the server chose; each row carries the object's metadata
(`PartialObjectMetadata`, the default `includeObject=Metadata`), from which kubectl prints the
NAMESPACE column of `-A`. In a watch, only the first event's table has column definitions.

Simplified: every kind gets the columns of a custom resource without printer columns, NAME and
AGE (https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables);
a real server adds a built-in kind's own columns (a pod's READY, STATUS, RESTARTS...) and a
CRD's `additionalPrinterColumns`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from testing.doubles.kube_api import Json

_ASKS_TABLE = re.compile(r"as=Table;\s*v=v1;\s*g=meta\.k8s\.io")
COLUMNS = [
    {"name": "Name", "type": "string", "format": "name", "priority": 0,
     "description": "Name must be unique within a namespace."},
    {"name": "Age", "type": "date", "format": "", "priority": 0,
     "description": "CreationTimestamp is a timestamp representing the server time when this "
                    "object was created."},
]


def asks_table(accept: str) -> bool:
    return _ASKS_TABLE.search(accept) is not None


def table(objects: list[Json], resource_version: str, columns: bool = True) -> Json:
    found: Json = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                   "metadata": {"resourceVersion": resource_version},
                   "rows": [_row(obj) for obj in objects]}
    if columns:
        found["columnDefinitions"] = COLUMNS
    return found


def _row(obj: Json) -> Json:
    meta = obj.get("metadata", {})
    partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
               "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return {"cells": [meta.get("name", ""), _age(meta.get("creationTimestamp"))],
            "object": partial}


def _age(stamp: str | None) -> str:
    try:
        made = datetime.strptime(stamp or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    return human_duration(int((datetime.now(UTC) - made).total_seconds()))


def human_duration(seconds: int) -> str:
    """A duration as kubectl's AGE shows it (k8s.io/apimachinery/pkg/util/duration)."""
    if seconds < -1:  # up to a second of clock skew is "now"
        return "<invalid>"
    if seconds < 0:
        return "0s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 730:
        return f"{days}d"
    if days < 8 * 365:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"
