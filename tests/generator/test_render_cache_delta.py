"""What a render after a few changes writes to the render cache: a small `index.delta`
beside the index, folded into the index once it grows, and kustomization.yaml texts kept by
what they list. Whatever the cache holds, the tree is byte-identical to one rendered without
it. Work is counted (files written), never timed."""

from __future__ import annotations

from pathlib import Path

import generator.cache as cache_module
from generator.cache import CACHE_DIR
from generator.render import render_tree
from tests.generator.test_render_cache import count_renders, write_specs


def folder_of(root: Path) -> Path:
    (folder,) = (root / CACHE_DIR).iterdir()
    return folder


def test_a_few_changes_write_a_delta_then_the_whole_index(repo, spec, monkeypatch) -> None:
    monkeypatch.setattr(cache_module, "DELTA_ENTRIES", 2)
    write_specs(repo, spec, 4)
    render_tree(repo.root)
    index = folder_of(repo.root) / "index"
    delta = index.with_name("index.delta")
    written = index.stat().st_mtime_ns, index.read_bytes()
    assert not delta.exists()
    repo.write_spec("job-1", spec(pods=3))  # one entry added, one removed: a delta
    assert render_tree(repo.root).files == render_tree(repo.root, use_cache=False).files
    assert delta.exists() and (index.stat().st_mtime_ns, index.read_bytes()) == written
    rendered = count_renders(monkeypatch)
    render_tree(repo.root)
    assert rendered == []  # the delta's entry is served from the cache
    repo.write_spec("job-2", spec(pods=3))  # four entries: more than the delta takes
    assert render_tree(repo.root).files == render_tree(repo.root, use_cache=False).files
    assert not delta.exists() and index.read_bytes() != written[1]
    rendered.clear()
    render_tree(repo.root)
    assert rendered == []  # every entry is in the index now


def test_a_removed_spec_leaves_the_index_through_the_delta(repo, spec, monkeypatch) -> None:
    write_specs(repo, spec, 3)
    render_tree(repo.root)
    (repo.root / "jobs/ml/job-0.yaml").unlink()
    tree = render_tree(repo.root)
    assert tree.files == render_tree(repo.root, use_cache=False).files
    assert not any("job-0" in path for path in tree.files)
    repo.write_spec("job-0", spec(pods=1))  # back as it was: its entry was dropped
    rendered = count_renders(monkeypatch)
    cached = render_tree(repo.root)
    assert rendered == [repo.root / "jobs/ml/job-0.yaml"]
    assert cached.files == render_tree(repo.root, use_cache=False).files


def test_a_broken_delta_is_a_miss(repo, spec) -> None:
    write_specs(repo, spec, 2)
    render_tree(repo.root)
    repo.write_spec("job-0", spec(pods=4))
    render_tree(repo.root)
    delta = folder_of(repo.root) / "index.delta"
    for junk in (b"\x80\x05junk", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01."):
        delta.write_bytes(junk)  # not a pickle; a pickle of the wrong shape
        assert render_tree(repo.root).files == render_tree(repo.root, use_cache=False).files


def test_rendered_jobs_follow_the_specs_listed(repo, spec) -> None:
    write_specs(repo, spec, 2)
    first = render_tree(repo.root)
    repo.write_spec("job-9", spec())
    added = render_tree(repo.root)
    (repo.root / "jobs/ml/job-9.yaml").unlink()
    removed = render_tree(repo.root)
    job = "kustomize/overlays/all-accelerators/jobs/team-ml/job-9.yaml"
    assert job in added.files and job not in removed.files
    assert removed.files.keys() == first.files.keys()
    assert removed.files == render_tree(repo.root, use_cache=False).files
