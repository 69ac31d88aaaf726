"""Property-based tests: any spec, valid or not, renders or fails cleanly, never half-way."""

from __future__ import annotations

import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.catalog import Catalog
from generator.errors import InvalidInput
from generator.output import write_tree
from generator.render import render_tree
from generator.yamlio import load_document
from tests.generator.conftest import ScratchRepo

FIELD_VALUES = {
    "kind": st.sampled_from(["rayjob", "raycluster", "job", "deployment", 3, None]),
    "cluster": st.sampled_from(["all-accelerators", "elsewhere", ""]),
    "owner": st.sampled_from(["a@b.io", "nobody", 7]),
    "pods": st.one_of(st.integers(-2, 10), st.sampled_from(["2", 1.5])),
    "gpus": st.one_of(st.integers(-1, 20), st.none()),
    "cpus": st.one_of(st.floats(-1, 400), st.sampled_from(["500m", "x", 0, float("nan")])),
    "memory": st.sampled_from(["64Gi", "9Ti", "lots", "-1Gi", 512]),
    "accelerator": st.sampled_from(["H100", "H100-Mega", "H200", "B200", "TPU", None]),
    "image": st.sampled_from(["trainer", "devbox", "repo/x:latest", "r@sha256:" + "a" * 64]),
    "cmd": st.one_of(st.none(), st.text(max_size=30)),
    "preemptible": st.one_of(st.booleans(), st.sampled_from(["yes", 1])),
    "deadline": st.sampled_from([None, "1d", "90s", "soon", "0s"]),
    "ttl": st.sampled_from([None, "1h", "-1h"]),
    "rack_affinity": st.sampled_from([None, {"level": "block"}, {"level": "rack"}, "yes"]),
    "env": st.dictionaries(st.sampled_from(["A", "B-C", "GKR_X", "_ok"]),
                           st.one_of(st.text(max_size=5), st.integers()), max_size=2),
    "labels": st.dictionaries(st.sampled_from(["team", "gkr.dev/x", "a/b/c", "ok"]),
                              st.sampled_from(["v", "has space", "x" * 70]), max_size=2),
    "head": st.sampled_from([{}, {"cpus": 4}, {"cpus": 99}, {"gpus": 1}]),
    "surprise": st.integers(),
}
specs = st.fixed_dictionaries({}, optional=FIELD_VALUES)
names = st.from_regex(r"[a-zA-Z][-a-zA-Z0-9_]{0,55}", fullmatch=True)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[ScratchRepo, Catalog]:
    """One repository and catalog for all examples (each example restores the jobs folder)."""
    repo = ScratchRepo(tmp_path_factory.mktemp("prop"))
    repo.write_spec("baseline", {"kind": "job", "cluster": "all-accelerators",
                                 "owner": "a@b.io", "image": "trainer", "cmd": "true"})
    catalog = Catalog(repo.root)
    write_tree(repo.root, render_tree(repo.root, catalog))
    return repo, catalog


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=names, spec=specs)
def test_any_spec_renders_or_fails_cleanly(shared, name: str, spec: dict) -> None:
    repo, catalog = shared
    before = repo.snapshot()
    path = repo.write_spec(name, spec)
    try:
        write_tree(repo.root, render_tree(repo.root, catalog))
    except InvalidInput as error:
        assert error.problems and all(p.file and p.message for p in error.problems)
        assert repo.snapshot() == before
    else:
        assert len(repo.snapshot()) > len(before)
    finally:
        if path.stem != "baseline":
            path.unlink()
            write_tree(repo.root, render_tree(repo.root, catalog))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200))
def test_any_file_content_fails_cleanly(shared, text: str) -> None:
    repo, catalog = shared
    path = repo.write_spec("garbage", text)
    try:
        render_tree(repo.root, catalog, use_cache=False)
    except InvalidInput as error:
        assert all(p.file == "jobs/ml/garbage.yaml" for p in error.problems)
    else:  # only a text that happens to be a valid spec may render
        assert isinstance(yaml.safe_load(path.read_text()), dict)
    finally:
        path.unlink()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_any_bytes_fail_cleanly(shared, data: bytes) -> None:
    """Random bytes (invalid UTF-8, control characters, NULs) are a located error or a spec."""
    repo, catalog = shared
    path = repo.root / "jobs/ml/bytes.yaml"
    path.write_bytes(data)
    try:
        render_tree(repo.root, catalog, use_cache=False)
    except InvalidInput as error:
        assert all(p.file == "jobs/ml/bytes.yaml" for p in error.problems), error.problems
    finally:
        path.unlink()


# YAML shapes: scalars of every resolvable kind, nested lists and mappings, then printed with
# anchors, aliases, merge keys and tags spliced in, so that the loader meets what users write.
# Strings avoid digits: PyYAML prints YAML 1.1, where `0o7` and `1e3` are strings it need not
# quote, while the loader reads YAML 1.2, where they are numbers (as ruamel did before it).
WORDS = st.text(alphabet=string.ascii_letters + " _-.", max_size=8)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), WORDS)
SHAPES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(WORDS.filter(bool), inner, max_size=4)), max_leaves=20)
SPLICES = st.sampled_from(["", "&a ", "*a", "<<: *a\n", "!!python/object:os.system ", "!x ",
                           "!!str ", "? [k]\n: v\n", "---\n", "- ", "\t", "\0"])


@settings(max_examples=200, deadline=None)
@given(shape=SHAPES, splice=SPLICES, at=st.integers(0, 400))
def test_any_yaml_shape_loads_or_fails_with_a_line(shape, splice: str, at: int) -> None:
    text = yaml.safe_dump(shape, sort_keys=False)
    text = text[:at] + splice + text[at:]
    try:
        data, lines = load_document("f.yaml", text)
    except InvalidInput as error:
        (problem,) = error.problems
        assert problem.file == "f.yaml" and problem.message
        assert problem.line is None or 1 <= problem.line <= text.count("\n") + 2
    else:
        assert all(1 <= line <= text.count("\n") + 1 for line in lines.values())
        if not splice:  # an untouched document loads as the data it was dumped from
            assert data == shape


ZONES = st.sampled_from(["us-central1-a", "us-central1-c", "europe-west4-b", ""])
NAMES = st.sampled_from(["a3h", "a3m", "a3u", "a4", "ray-heads", "Bad_Pool"])
TEAM_KEYS = st.sampled_from(["ml", "vision", "ML Team", "x" * 64, "ok-team"])
NAMESPACES = st.sampled_from(["team-ml", "team-vision", "Team_X"])
QUANTITIES = st.sampled_from(["32Gi", "1Ti", " 8Gi", "1e3Gi", "-1Gi", "110Gi", "0"])


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(zones=st.lists(ZONES, min_size=0, max_size=3), pools=st.lists(
    st.tuples(st.sampled_from(["H100", "H200", "B200", "TPU"]), NAMES, ZONES), max_size=3),
    teams=st.lists(st.tuples(TEAM_KEYS, NAMESPACES), max_size=3),
    head=st.tuples(st.integers(-1, 64), QUANTITIES))
def test_any_cluster_catalog_loads_or_fails_with_file_and_line(
    tmp_path_factory, zones, pools, teams, head
) -> None:
    """Random cluster files: they load, or every problem names the file, with a line."""
    repo = ScratchRepo(tmp_path_factory.mktemp("catalog"))
    nics = {"H100": 4, "H200": 8, "B200": 8, "TPU": 0}
    cluster = {
        "name": "all-accelerators", "project": "p", "region": "us-central1", "zones": zones,
        "kube_context": "ctx",
        "head_pool": {"name": "ray-heads", "machine_type": "n2-standard-32", "nodes": 2,
                      "allocatable": {"cpus": 30, "memory": "110Gi"},
                      "head_defaults": {"cpus": head[0], "memory": head[1]}},
        "accelerators": {name: {"node_pool": pool, "nodes": 2, "zone": zone, "reservation": "r",
                                "gpu_networks": [f"n{i}" for i in range(nics[name])]}
                         | ({"gvnic_network": "g"} if name in ("H200", "B200") else {})
                         for name, pool, zone in pools},
        "teams": {key: {"namespace": namespace, "queue": "q"} for key, namespace in teams},
    }
    path = repo.root / "clusters/all-accelerators.yaml"
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    try:
        Catalog(repo.root).load_all()
    except InvalidInput as error:
        assert all(p.file == "clusters/all-accelerators.yaml" and p.line for p in error.problems)
