"""`gkr schema`: a real JSON Schema (2020-12) that every committed spec passes, with the
catalog's clusters, accelerators and images as enums, and `name` left to the file name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from generator.catalog import Catalog
from generator.placement import spec_files
from tests.cli.conftest import gkr

ROOT = Path(__file__).resolve().parents[2]
PYDANTIC_ONLY = {"gt", "ge", "lt", "le", "multiple_of", "max_digits", "decimal_places"}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    shown = gkr("schema", "--root", str(ROOT))
    assert shown.code == 0, shown.err
    return json.loads(shown.out)


def _keys(node: Any, inside_names: bool = False) -> set[str]:
    """Every schema keyword used (the keys of `properties` and `$defs` are names, skipped)."""
    if isinstance(node, list):
        return set().union(*(_keys(item) for item in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set() if inside_names else set(node)
    for key, value in node.items():
        found |= _keys(value, not inside_names and key in ("properties", "$defs"))
    return found


def test_the_schema_is_valid_json_schema_with_no_pydantic_keywords(schema) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert not _keys(schema) & PYDANTIC_ONLY
    assert "name" not in schema["required"]


def test_every_committed_spec_passes(schema) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    specs = spec_files(ROOT)
    assert len(specs) >= 5
    for path in specs:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], f"{path.relative_to(ROOT)}: {errors}"


def test_catalog_names_are_enums(schema) -> None:
    catalog = Catalog(ROOT)
    fields = schema["properties"]
    assert fields["cluster"]["enum"] == sorted(catalog.clusters)
    offered = next(b["enum"] for b in fields["accelerator"]["anyOf"] if "enum" in b)
    assert offered == sorted(catalog.accelerators)
    assert fields["image"]["anyOf"][0]["enum"] == sorted(catalog.images)


@pytest.mark.parametrize(("change", "valid"), [
    ({"cluster": "nowhere"}, False),
    ({"accelerator": "TPU-v9"}, False),
    ({"image": "ubuntu:latest"}, False),
    ({"image": "us-docker.pkg.dev/x/y@sha256:" + "a" * 64}, True),
    ({"cpus": "500m"}, True),  # a quantity, as gkr accepts
    ({"cpus": 0}, False),
    ({"pods": 0}, False),
    ({"nonsense": 1}, False),
])
def test_the_schema_agrees_with_gkr_on_edits(schema, change, valid) -> None:
    spec = yaml.safe_load((ROOT / "jobs/llm/llm-pretrain-7b.yaml").read_text()) | change
    assert jsonschema.Draft202012Validator(schema).is_valid(spec) is valid
