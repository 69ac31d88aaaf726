"""YAML in and out.

User files (job specs, catalog files, env files) are untrusted: `read_input` reads them only
from inside the repository, bounded in size and as UTF-8; `load_document` builds plain data
from libyaml's event stream, bounded in nesting and in alias expansion, and records the line
of every field. Every malformed input becomes a file:line problem, never a traceback.
Rendered manifests are parsed and written with libyaml directly: they are machine-made.
"""

from __future__ import annotations

import functools
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import yaml

from generator.errors import InvalidInput, Problem

FieldPath = tuple[Any, ...]  # keys (str, int, …) and sequence indexes
LineMap = dict[FieldPath, int]

# Bounds on one input file. The largest catalog file is ~10 KiB and ~1,000 values, and no
# catalog or spec nests deeper than 10 levels; the limits leave room and stop alias bombs.
MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000
MAX_DIGITS = 64  # Python refuses to parse integers of more than 4,300 digits

# YAML 1.2 core schema (yaml.org/spec/1.2.2, §10.3.2): what a plain scalar resolves to.
# Timestamps and YAML 1.1's yes/no are strings, as they were with ruamel's YAML 1.2 loader.
_NULL = re.compile(r"(?:~|null|Null|NULL|)")
_BOOL = {"true": True, "True": True, "TRUE": True,
         "false": False, "False": False, "FALSE": False}
_INT = re.compile(r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_CORE = "tag:yaml.org,2002:"
_TAGS = {f"{_CORE}{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")}
MERGE = "<<"


def refusal(path: Path, root: Path, anywhere: bool = False) -> str | None:
    """Why `path` must not be read as an input (None: it may be). A path inside the
    repository must resolve inside it, so a symlink cannot pull in /etc/shadow; `anywhere`
    lets a file the user named on the command line live outside the repository."""
    try:
        return _refusal(path, root, anywhere)
    except OSError as error:  # a folder on the way that may not be entered, say
        return f"cannot be read: {error.strerror}"


@functools.lru_cache(maxsize=8)
def _roots(root: Path) -> tuple[Path, Path]:
    """The repository root as given and as resolved, once per render, not once per file."""
    return root.absolute(), root.resolve()


def _refusal(path: Path, root: Path, anywhere: bool) -> str | None:
    lexical = Path(os.path.normpath(path.absolute()))
    given_root, real_root = _roots(root)
    inside = lexical.is_relative_to(given_root) or lexical.is_relative_to(real_root)
    if not inside and not anywhere:
        return "outside the repository; gkr reads inputs only from inside it"
    if path.is_symlink() and not path.exists():
        return "a symbolic link to a missing file"
    if not path.exists():
        return "not found"
    if inside and not path.resolve().is_relative_to(real_root):
        return "a symbolic link out of the repository; gkr reads inputs only from inside it"
    if path.is_dir():
        return "a directory, not a file"
    if not path.is_file():
        return "not a regular file"
    if path.stat().st_size > MAX_BYTES:
        return f"{path.stat().st_size} bytes; an input file may have at most {MAX_BYTES}"
    return None


def read_input(path: Path, root: Path, display: str, anywhere: bool = False) -> str:
    """The text of an input file, checked by `refusal` and decoded as UTF-8."""
    why = refusal(path, root, anywhere)
    if why is not None:
        raise InvalidInput([Problem(display, None, "", why)])
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise InvalidInput([Problem(display, None, "", f"cannot be read: {error.strerror}")]) \
            from None
    if len(data) > MAX_BYTES:  # grew since the check
        raise InvalidInput([Problem(display, None, "", f"larger than {MAX_BYTES} bytes")])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InvalidInput([Problem(display, line, "", f"not UTF-8 text (byte "
                                    f"0x{data[error.start]:02x}); save the file as UTF-8")]) \
            from None


def load_document(display: str, text: str) -> tuple[Any, LineMap]:
    """Parse one YAML document; return plain data and the line (1-based) of every field."""
    loader = yaml.CSafeLoader(text)
    try:
        return _Builder(display, loader).document()
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise _invalid(display, mark.line + 1 if mark else None,
                       f"not valid YAML: {error.problem or error.context}") from None
    except yaml.reader.ReaderError as error:
        line = text.count("\n", 0, error.position) + 1
        code = error.character if isinstance(error.character, int) else ord(error.character)
        raise _invalid(display, line, f"not valid YAML: the control character U+{code:04X} "
                                      "is not allowed") from None
    except yaml.YAMLError as error:
        raise _invalid(display, None, f"not valid YAML: {error}") from None
    finally:
        loader.dispose()


def _invalid(display: str, line: int | None, message: str) -> InvalidInput:
    return InvalidInput([Problem(display, line, "", message)])


@dataclass(frozen=True)
class _Anchor:
    """An anchored node: its value, the lines of its fields (relative), what it costs."""

    value: Any
    lines: list[tuple[FieldPath, int]]
    cost: int


class _Builder:
    """Plain data from a libyaml event stream: one recursive descent over the events, so that
    nesting, alias expansion and tags are bounded and located before anything is built."""

    def __init__(self, display: str, loader: yaml.CSafeLoader) -> None:
        self.display = display
        self.loader = loader
        self.lines: list[tuple[FieldPath, int]] = []
        self.anchors: dict[str, _Anchor] = {}
        self.values = 0

    def fail(self, line: int, message: str) -> NoReturn:
        raise _invalid(self.display, line, message)

    def next(self) -> Any:
        return self.loader.get_event()

    def peek(self) -> Any:
        return self.loader.peek_event()

    def peek_line(self) -> int:
        return int(self.peek().start_mark.line) + 1

    def document(self) -> tuple[Any, LineMap]:
        self.loader.get_event()  # the stream start
        if self.loader.check_event(yaml.StreamEndEvent):
            return None, {}
        self.loader.get_event()  # the document start
        data = self.node((), 1)
        self.loader.get_event()  # the document end
        if not self.loader.check_event(yaml.StreamEndEvent):
            self.fail(self.peek_line(), "a second YAML document; a file holds exactly one")
        return data, dict(self.lines)

    def node(self, path: FieldPath, depth: int) -> Any:
        event = self.next()
        line = event.start_mark.line + 1
        if depth > MAX_DEPTH:
            self.fail(line, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(event, yaml.AliasEvent):
            return self.alias(event.anchor or "", path, line)
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in _TAGS:
            self.fail(line, f"the tag {tag.replace(_CORE, '!!')} is not allowed: "
                            "plain YAML values only")
        start, cost = len(self.lines), self.values
        value = self.build(event, path, depth, line)
        self.count(1, line)
        if event.anchor is not None:
            relative = [(p[len(path):], n) for p, n in self.lines[start:]]
            self.anchors[event.anchor] = _Anchor(value, relative, self.values - cost)
        return value

    def build(self, event: Any, path: FieldPath, depth: int, line: int) -> Any:
        if isinstance(event, yaml.ScalarEvent):
            return self.scalar(event, line)
        if isinstance(event, yaml.SequenceStartEvent):
            return self.sequence(path, depth)
        return self.mapping(path, depth)

    def count(self, values: int, line: int) -> None:
        self.values += values
        if self.values > MAX_VALUES:
            self.fail(line, f"more than {MAX_VALUES} values once aliases are expanded "
                            "(an alias bomb?)")

    def alias(self, name: str, path: FieldPath, line: int) -> Any:
        anchor = self.anchors.get(name)
        if anchor is None:
            self.fail(line, f"alias *{name} names no anchor defined above it")
        self.count(anchor.cost, line)
        self.lines.extend(((*path, *rest), n) for rest, n in anchor.lines)
        return anchor.value

    def scalar(self, event: Any, line: int) -> Any:
        value, tag = event.value, event.tag
        if tag is None and event.implicit[0]:
            return self.resolve(value, line)
        if tag in (None, "!", f"{_CORE}str"):
            return value
        resolved = self.resolve(value, line)
        if tag == f"{_CORE}float" and _type_tag(resolved) == f"{_CORE}int":
            resolved = float(resolved)
        if _type_tag(resolved) != tag:
            self.fail(line, f"{value!r} is not a {tag.replace(_CORE, '!!')}")
        return resolved

    def resolve(self, value: str, line: int) -> Any:
        if _NULL.fullmatch(value):
            return None
        if value in _BOOL:
            return _BOOL[value]
        if _INT.fullmatch(value):
            if len(value) > MAX_DIGITS:
                self.fail(line, f"a number of more than {MAX_DIGITS} digits")
            return int(value, 0) if value[:2] in ("0o", "0x") else int(value)
        if _FLOAT.fullmatch(value):  # Python spells .inf and .nan without the dot
            return float(value.replace(".inf", "inf").replace(".Inf", "inf")
                         .replace(".INF", "inf").replace(".nan", "nan").replace(".NaN", "nan")
                         .replace(".NAN", "nan"))
        return value

    def sequence(self, path: FieldPath, depth: int) -> list[Any]:
        items: list[Any] = []
        while not self.loader.check_event(yaml.SequenceEndEvent):
            self.lines.append(((*path, len(items)), self.peek_line()))
            items.append(self.node((*path, len(items)), depth + 1))
        self.loader.get_event()
        return items

    def mapping(self, path: FieldPath, depth: int) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first: dict[Any, int] = {}
        merged: list[tuple[Any, list[tuple[FieldPath, int]]]] = []
        while not self.loader.check_event(yaml.MappingEndEvent):
            key, line, plain = self.key(depth)
            if key == MERGE and plain:
                merged.append(self.merge_source(path, depth, line))
                continue
            if key in first:
                self.fail(line, f"duplicate key {key!r} (first on line {first[key]})")
            first[key] = line
            self.lines.append(((*path, key), line))
            out[key] = self.node((*path, key), depth + 1)
        self.loader.get_event()
        for source, lines in merged:
            self.merge(out, path, source, lines)
        return out

    def key(self, depth: int) -> tuple[Any, int, bool]:
        event, line = self.peek(), self.peek_line()
        plain = isinstance(event, yaml.ScalarEvent) and event.tag is None and event.implicit[0]
        key = self.node((), depth + 1)
        if isinstance(key, dict | list):
            self.fail(line, "a mapping key must be a plain value, not a list or mapping")
        return key, line, plain

    def merge_source(
        self, path: FieldPath, depth: int, line: int
    ) -> tuple[Any, list[tuple[FieldPath, int]]]:
        """The mapping(s) of a merge key `<<: *base` and their lines, relative to it. YAML's
        merge keys (yaml.org/type/merge.html) are supported: users copy them from Kubernetes
        examples, and their fields keep the lines where they are written."""
        start = len(self.lines)
        value = self.node((*path, MERGE), depth + 1)
        lines = [(p[len(path) + 1:], n) for p, n in self.lines[start:]]
        del self.lines[start:]
        sources = value if isinstance(value, list) else [value]
        if not sources or not all(isinstance(source, dict) for source in sources):
            self.fail(line, "<< (a merge key) takes a mapping or a list of mappings")
        return value, lines

    def merge(
        self, out: dict[Any, Any], path: FieldPath, value: Any,
        lines: list[tuple[FieldPath, int]],
    ) -> None:
        """Keys of the merged mappings that the mapping does not set itself; the first
        mapping listed wins (the merge key's rule)."""
        if isinstance(value, dict):
            value, lines = [value], [((0, *p), n) for p, n in lines]
        for index, source in enumerate(value):
            for key, item in source.items():
                if key in out:
                    continue
                out[key] = item
                self.lines.extend(((*path, key, *p[2:]), n) for p, n in lines
                                  if p[:2] == (index, key))


def _type_tag(value: Any) -> str:
    kinds: list[tuple[type | tuple[type, ...], str]] = [
        (bool, "bool"), (int, "int"), (float, "float"), (type(None), "null")]
    return next((f"{_CORE}{name}" for kind, name in kinds if isinstance(value, kind)),
                f"{_CORE}str")


def line_of(lines: LineMap, path: FieldPath) -> int | None:
    """Line of the deepest known prefix of `path` (a missing field points at its parent)."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None


MAX_REMEMBERED = 1 << 18  # tag resolutions _Dumper keeps (a few MB at most)


class _Dumper(yaml.CSafeDumper):
    """Block style everywhere; multi-line strings as literal blocks for readable diffs.

    Resolving a scalar's implicit tag (does "true" or "0x1F" need quotes?) is a pure
    function of its text, and libyaml's emitter asks it twice per scalar: answers are
    remembered across documents, since rendered jobs repeat most keys and values."""

    _resolved: ClassVar[dict[tuple[str, tuple[bool, bool]], str]] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or len(self._resolved) > MAX_REMEMBERED:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        found = self._resolved.get(key)
        if found is None:
            found = self._resolved[key] = super().resolve(kind, value, implicit)
        return found


def _represent_str(dumper: _Dumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar(f"{_CORE}str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_documents(documents: list[Any]) -> str:
    """Deterministic multi-document YAML: key order as built, no aliases, no line wrapping.

    PyYAML's representer is pure Python and was half the cost of rendering a job; the
    plain types that manifests are made of become nodes here directly, exactly as the
    representer would make them, and libyaml emits them. Anything else, and any document
    that holds one list or dict twice (the representer would write an alias), goes
    through the representer."""
    stream = io.StringIO()
    dumper = _Dumper(stream, sort_keys=False, default_flow_style=False, allow_unicode=True,
                     width=1 << 16, explicit_start=len(documents) > 1)
    dumper.open()
    for document in documents:
        try:
            node = _node(dumper, document, set())
        except _Shared:
            node = dumper.represent_data(document)
        dumper.serialize(node)
        dumper.represented_objects, dumper.object_keeper, dumper.alias_key = {}, [], None
    dumper.close()
    return stream.getvalue()


class _Shared(Exception):
    """A document holds one container twice."""


def _node(dumper: _Dumper, value: Any, seen: set[int]) -> yaml.Node:
    kind = type(value)
    if kind is str:
        return yaml.ScalarNode(f"{_CORE}str", value, style="|" if "\n" in value else None)
    if kind is dict or kind is list:
        if id(value) in seen:
            raise _Shared
        seen.add(id(value))
        if kind is list:
            return yaml.SequenceNode(f"{_CORE}seq", [_node(dumper, v, seen) for v in value],
                                     flow_style=False)
        pairs = [(_node(dumper, k, seen), _node(dumper, v, seen)) for k, v in value.items()]
        return yaml.MappingNode(f"{_CORE}map", pairs, flow_style=False)
    if kind is bool:
        return yaml.ScalarNode(f"{_CORE}bool", "true" if value else "false")
    if kind is int:
        return yaml.ScalarNode(f"{_CORE}int", str(value))
    if value is None:
        return yaml.ScalarNode(f"{_CORE}null", "null")
    return dumper.represent_data(value)


def load_all_rendered(text: str) -> list[Any]:
    """Every document of machine-made YAML (a rendered file)."""
    return [doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc is not None]

