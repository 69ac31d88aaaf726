"""The JSON Schema of a job spec file, for editors (yaml-language-server) and CI: `gkr schema`.

It describes the file a researcher writes, not the model behind it: `name` is not required
(the file name is the name), constraints are JSON Schema keywords (pydantic leaves `gt` and
friends in place where a validator wraps a type), and the catalog's clusters, accelerators
and images are enums.
"""

from __future__ import annotations

from typing import Any

from generator.catalog import PINNED_IMAGE, Catalog
from generator.spec import JobSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# pydantic's names for numeric constraints, and JSON Schema's.
KEYWORDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
FROM_FILE_NAME = ("name",)
NAMED = ("properties", "$defs", "patternProperties")


def job_schema(catalog: Catalog) -> dict[str, Any]:
    """The schema of `jobs/<team>/<name>.yaml`, with the catalog's names as enums."""
    document = standard(JobSpec.model_json_schema())
    document["required"] = [f for f in document["required"] if f not in FROM_FILE_NAME]
    fields = document["properties"]
    fields["cluster"] = _one_of(fields["cluster"], {"enum": sorted(catalog.clusters)})
    fields["accelerator"] = _one_of(fields["accelerator"], {"enum": sorted(catalog.accelerators)})
    fields["image"] = _one_of(fields["image"], {"anyOf": [
        {"enum": sorted(catalog.images)}, {"pattern": PINNED_IMAGE}]})
    return {"$schema": DIALECT, "title": "GKR job spec", **document}


def standard(node: Any, names: bool = False) -> Any:
    """The same schema with pydantic's constraint names replaced by JSON Schema keywords;
    `names`: the keys of `node` are field or definition names, kept as they are."""
    if isinstance(node, list):
        return [standard(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {key if names else KEYWORDS.get(key, key):
            standard(value, not names and key in NAMED) for key, value in node.items()}


def _one_of(field: dict[str, Any], allowed: dict[str, Any]) -> dict[str, Any]:
    """`field` with its string form restricted to `allowed` (a null branch stays as it is)."""
    if "anyOf" not in field:
        return {**field, **allowed}
    branches = [{**b, **allowed} if b.get("type") == "string" else b for b in field["anyOf"]]
    return {**field, "anyOf": branches}
