"""`dump_documents` builds YAML nodes itself instead of through PyYAML's representer (the
larger half of rendering a job): its output must stay byte for byte what the representer
gives, for any document made of the types manifests use, and for any other document."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.yamlio import _Dumper, dump_documents

TRICKY = ["", " ", "true", "True", "yes", "on", "null", "~", "0x1F", "0o17", "1e3", "1_000",
          ".inf", "-.5", "2024-01-01", "- a", ": x", "a: b", "#c", "a #c", " lead", "trail ",
          "multi\nline", "\n", "a\n", "a\n\n", " a\nb", "|", ">", "'", '"', "=", "<<", "*x",
          "&x", "!tag", "%YAML", "---", "...", "@gkr-embed-0@", "tab\there", "é ü 日本",
          "\x07bell", "\u2028sep", "a" * 200]


class _Reference(yaml.CSafeDumper):
    """What dump_documents did before: PyYAML's own representer, strings as above."""


_Reference.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def reference(documents: list[Any]) -> str:
    return yaml.dump_all(documents, Dumper=_Reference, sort_keys=False,
                         default_flow_style=False, allow_unicode=True, width=1 << 16,
                         explicit_start=len(documents) > 1)


strings = st.sampled_from(TRICKY) | st.text(max_size=30)
scalars = (strings | st.integers() | st.booleans() | st.none()
           | st.floats(allow_nan=False) | st.tuples(st.integers()))
keys = strings | st.integers() | st.booleans()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=25)
documents = st.lists(st.dictionaries(keys, values, max_size=5), min_size=1, max_size=3)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_any_document_dumps_as_the_representer_would(docs: list[Any]) -> None:
    assert dump_documents(docs) == reference(docs)


def test_a_container_held_twice_is_dumped_as_the_representer_would() -> None:
    shared: dict[str, Any] = {"image": "trainer", "args": ["a", "b"]}
    docs = [{"first": shared, "second": shared}, {"plain": 1}]
    assert dump_documents(docs) == reference(docs) and "&id001" in reference(docs)


def test_tag_resolution_depends_on_the_text_alone() -> None:
    """What makes remembering resolutions sound: no path-dependent resolvers."""
    assert not _Dumper.yaml_path_resolvers
