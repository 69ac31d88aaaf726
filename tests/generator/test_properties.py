"""Property-based tests: any spec, valid or not, renders or fails cleanly, never half-way."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.catalog import Catalog
from generator.errors import InvalidInput
from generator.output import write_tree
from generator.render import render_tree
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
