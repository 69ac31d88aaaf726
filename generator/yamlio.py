"""YAML in and out.

User files (job specs, catalogs) are read with ruamel.yaml so that every value keeps its
line number for error messages. Rendered manifests are parsed and written with libyaml
(PyYAML's C bindings): they are machine-made, and libyaml is ~20x faster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from generator.errors import InvalidInput, Problem

FieldPath = tuple[str | int, ...]
LineMap = dict[FieldPath, int]


def load_document(path: Path, display: str, text: str | None = None) -> tuple[Any, LineMap]:
    """Parse one YAML document; return plain data and the line (1-based) of every field."""
    if text is None:
        text = path.read_text(encoding="utf-8")
    try:
        data = YAML(typ="rt").load(text)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else None
        problem = Problem(display, line, "", f"not valid YAML: {error.problem}")
        raise InvalidInput([problem]) from None
    except YAMLError as error:
        raise InvalidInput([Problem(display, None, "", f"not valid YAML: {error}")]) from None
    lines: LineMap = {}
    return _plain(data, (), lines), lines


def _plain(node: Any, path: FieldPath, lines: LineMap) -> Any:
    """Convert ruamel's commented containers to dicts/lists, recording line numbers."""
    if isinstance(node, CommentedMap):
        out = {}
        for key, value in node.items():
            lines[(*path, key)] = node.lc.key(key)[0] + 1
            out[key] = _plain(value, (*path, key), lines)
        return out
    if isinstance(node, CommentedSeq):
        for index in range(len(node)):
            lines[(*path, index)] = node.lc.item(index)[0] + 1
        return [_plain(value, (*path, i), lines) for i, value in enumerate(node)]
    return node


def line_of(lines: LineMap, path: FieldPath) -> int | None:
    """Line of the deepest known prefix of `path` (a missing field points at its parent)."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


class _Dumper(yaml.CSafeDumper):
    """Block style everywhere; multi-line strings as literal blocks for readable diffs."""


def _represent_str(dumper: _Dumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_documents(documents: list[Any]) -> str:
    """Deterministic multi-document YAML: key order as built, no aliases, no line wrapping."""
    return yaml.dump_all(
        documents, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
        allow_unicode=True, width=1 << 16, explicit_start=len(documents) > 1,
    )


def load_rendered(text: str) -> Any:
    """Parse machine-made YAML (template output); errors here are template bugs."""
    return yaml.load(text, Loader=yaml.CSafeLoader)


def load_all_rendered(text: str) -> list[Any]:
    return [doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc is not None]
