"""Helm values checked against the chart's own contract at the pinned version, vendored in
charts/<chart>-<version>/ (charts/SOURCES.md): its default values.yaml and, where the chart
ships one, its values.schema.json.

A chart reads its values by path and ignores the rest, so a misspelt key is silently dropped
and the add-on runs on its default. The defaults name every key a chart reads (commented
examples aside), so:

* under a mapping the defaults fill, a key they lack is refused, with the keys allowed there;
* under an empty mapping or a null default the values are free-form (labels, annotations,
  whole config files), and so are subcharts' values (Chart.yaml `dependencies`, by alias or
  name), Helm's `global`, the few paths in OPEN that a chart renders whole, and the keys in
  COMMENTED that a chart's values.yaml documents only in a comment;
* a mapping given where the defaults hold a scalar or a list, or the reverse, is refused.

Where the chart ships values.schema.json, the values merged over the defaults (Helm's
coalescing: mappings merge, anything else replaces, null removes the key) are validated
against it, as `helm install` does (https://helm.sh/docs/topics/charts/#schema-files; Helm 3
validates draft-07 schemas, the default here for a schema that names none).
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CHART_DIR = Path(__file__).parent / "charts"
KeyPath = tuple[str | int, ...]
# Paths a chart renders whole, so any key below them is the chart's to pass on: grafana turns
# `grafana.ini` into the ini file, section by section (values.yaml: "values in map will be
# converted to ini format").
OPEN: dict[str, tuple[KeyPath, ...]] = {"grafana": (("grafana.ini",),)}
# Keys a chart's values.yaml documents only in a comment, so that its defaults lack them; add
# one here when the catalog needs it: grafana's admin password ("# adminPassword: ...").
COMMENTED: dict[str, tuple[KeyPath, ...]] = {"grafana": (("adminPassword",),)}
SHOWN_KEYS = 24  # keys listed in a message; the rest are counted


@dataclass(frozen=True)
class ValueProblem:
    """One value the chart does not take: where (keys from the values' root) and why."""

    path: KeyPath
    message: str

    @property
    def dotted(self) -> str:
        return ".".join(str(part) for part in self.path)


@dataclass(frozen=True)
class ChartContract:
    """A chart's default values, subcharts and schema, as vendored."""

    name: str
    version: str
    defaults: dict[str, Any]
    subcharts: frozenset[str]
    schema: dict[str, Any] | None

    @property
    def source(self) -> str:
        return f"generator/schemas/charts/{self.name}-{self.version}"

    def problems(self, values: dict[str, Any]) -> list[ValueProblem]:
        """Every value of `values` this chart does not take, in path order."""
        found = list(self._walk(values, self.defaults, ()))
        found += [p for p in self._schema_problems(values) if not _covered(p, found)]
        return sorted(found, key=lambda p: tuple(map(str, p.path)))

    def _free(self, path: KeyPath) -> bool:
        if len(path) == 1 and (path[0] == "global" or path[0] in self.subcharts):
            return True
        known = (*OPEN.get(self.name, ()), *COMMENTED.get(self.name, ()))
        return any(path[:len(free)] == free for free in known)

    def _walk(self, values: dict[str, Any], defaults: dict[str, Any],
              path: KeyPath) -> list[ValueProblem]:
        found = []
        for key, value in values.items():
            where = (*path, key)
            if self._free(where):
                continue
            if key not in defaults:
                found.append(ValueProblem(where, self._unknown(str(key), defaults)))
            else:
                found += self._compare(value, defaults[key], where)
        return found

    def _compare(self, value: Any, default: Any, where: KeyPath) -> list[ValueProblem]:
        if value is None or default is None:
            return []  # null removes a default; a null default takes anything
        if isinstance(default, dict) != isinstance(value, dict):
            shape = "a mapping" if isinstance(default, dict) else f"a {type(default).__name__}"
            return [ValueProblem(where, f"is {shape} in the {self.name} {self.version} chart's "
                                        f"defaults ({self.source}/values.yaml)")]
        if isinstance(value, dict) and default:
            return self._walk(value, default, where)
        return []

    def _unknown(self, key: str, defaults: dict[str, Any]) -> str:
        allowed = sorted(map(str, defaults))
        close = difflib.get_close_matches(key, allowed, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        shown = ", ".join(allowed[:SHOWN_KEYS])
        more = f" and {len(allowed) - SHOWN_KEYS} more" if len(allowed) > SHOWN_KEYS else ""
        return (f"the {self.name} {self.version} chart has no such value "
                f"({self.source}/values.yaml); {hint}allowed here: {shown}{more}")

    def _schema_problems(self, values: dict[str, Any]) -> list[ValueProblem]:
        if self.schema is None:
            return []
        validator = _validator(self.name, self.version)
        errors = validator.iter_errors(coalesce(self.defaults, values))
        return [ValueProblem(tuple(error.absolute_path), f"{error.message} (the schema of the "
                             f"{self.name} {self.version} chart, {self.source}/values.schema.json)")
                for error in errors]


def _covered(problem: ValueProblem, found: list[ValueProblem]) -> bool:
    """A schema error at or above a key already reported says the same thing again."""
    return any(other.path[:len(problem.path)] == problem.path for other in found)


def coalesce(defaults: Any, values: Any) -> Any:
    """`values` over `defaults` as Helm merges them: mappings key by key, null removes."""
    if not (isinstance(defaults, dict) and isinstance(values, dict)):
        return values
    merged = dict(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = coalesce(defaults.get(key), value)
    return merged


@functools.cache
def contract(chart: str, version: str) -> ChartContract | None:
    """The vendored contract of a chart at a version; None when none is vendored."""
    folder = CHART_DIR / f"{chart}-{version}"
    if not (folder / "values.yaml").is_file():
        return None
    defaults = yaml.load((folder / "values.yaml").read_text(encoding="utf-8"),
                         Loader=yaml.CSafeLoader) or {}
    meta = yaml.load((folder / "Chart.yaml").read_text(encoding="utf-8"),
                     Loader=yaml.CSafeLoader) or {}
    subcharts = frozenset(str(d.get("alias") or d["name"]) for d in meta.get("dependencies") or [])
    schema_file = folder / "values.schema.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8")) if schema_file.is_file() \
        else None
    return ChartContract(chart, version, defaults, subcharts, schema)


@functools.cache
def _validator(chart: str, version: str) -> Any:
    found = contract(chart, version)
    assert found is not None and found.schema is not None
    cls = jsonschema.validators.validator_for(found.schema, default=jsonschema.Draft7Validator)
    return cls(found.schema)

