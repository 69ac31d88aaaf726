"""The render cache and the kustomize build cache: what a render after few changes does (and
does not do), and that cached output is byte-identical to a render from scratch.

Work is counted (specs rendered, modules imported, kubectl runs), never timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import generator.render as render_module
import generator.validate as validate_module
from generator.cache import CACHE_DIR, catalog_inputs
from generator.catalog import Catalog
from generator.output import write_tree
from generator.render import render_tree
from generator.validate import validate_repository

JOBS = "kustomize/overlays/all-accelerators/jobs/team-ml"


def count_renders(monkeypatch) -> list[Path]:
    rendered: list[Path] = []
    original = render_module._render_spec

    def counting(path: Path, root: Path, catalog: Catalog):
        rendered.append(path)
        return original(path, root, catalog)

    monkeypatch.setattr(render_module, "_render_spec", counting)
    return rendered


def write_specs(repo, spec, count: int, **changes) -> None:
    for i in range(count):
        repo.write_spec(f"job-{i}", spec(pods=1 + i % 2, **changes))


def test_the_fingerprint_covers_every_catalog_file(repo) -> None:
    assert set(Catalog(repo.root).files()) <= set(catalog_inputs(repo.root))


def test_a_one_spec_change_renders_one_spec(repo, spec, monkeypatch) -> None:
    write_specs(repo, spec, 5)
    cold = render_tree(repo.root)
    rendered = count_renders(monkeypatch)
    assert render_tree(repo.root).files == cold.files and rendered == []
    repo.write_spec("job-3", spec(pods=4))
    warm = render_tree(repo.root)
    assert rendered == [repo.root / "jobs/ml/job-3.yaml"]
    assert warm.files == render_tree(repo.root, use_cache=False).files


def test_cached_jobs_give_their_documents_and_resolved_jobs(repo, spec) -> None:
    write_specs(repo, spec, 3, env={"A": "1"})
    fresh = render_tree(repo.root, use_cache=False)
    render_tree(repo.root)
    cached = render_tree(repo.root)
    assert dict(cached.manifests) == dict(fresh.manifests)
    assert [(j.name, j.pool, j.user_env) for j in cached.jobs] == \
        [(j.name, j.pool, j.user_env) for j in fresh.jobs]


def test_a_lost_or_broken_cache_entry_is_rendered_again(repo, spec, monkeypatch) -> None:
    write_specs(repo, spec, 2)
    fresh = render_tree(repo.root, use_cache=False)
    render_tree(repo.root)
    folder = next((repo.root / CACHE_DIR).iterdir())
    for entry in (folder / "jobs").iterdir():
        entry.write_bytes(b"not a pickle")
    rendered = count_renders(monkeypatch)
    cached = render_tree(repo.root)
    assert rendered == []  # writing the tree needs only the index
    assert dict(cached.manifests) == dict(fresh.manifests)  # details rendered on demand
    assert len(rendered) == 2
    (folder / "index").write_bytes(b"\x80\x05junk")
    assert render_tree(repo.root).files == fresh.files


def test_a_render_with_nothing_to_render_imports_no_renderer(repo, spec) -> None:
    """What makes a no-op `gkr render` fast: the catalog models, templates and platform
    producers are not even imported when every output comes from the cache."""
    write_specs(repo, spec, 2)
    write_tree(repo.root, render_tree(repo.root))
    probe = ("import json, sys; from pathlib import Path; "
             "from generator.render import render_tree; from generator.output import write_tree; "
             "write_tree(Path(sys.argv[1]), render_tree(Path(sys.argv[1]))); "
             "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe, str(repo.root)], capture_output=True,
                          text=True, check=True)
    loaded = set(json.loads(done.stdout))
    heavy = {"generator.catalog", "generator.resolve", "generator.manifests", "jinja2",
             "generator.platform"}
    assert not heavy & loaded, heavy & loaded


def test_a_symlinked_spec_is_never_served_from_the_cache(repo, spec, monkeypatch) -> None:
    target = repo.write_spec("real", spec())
    (repo.root / "jobs/ml/linked.yaml").symlink_to(target)
    render_tree(repo.root)
    rendered = count_renders(monkeypatch)
    render_tree(repo.root)
    assert rendered == [repo.root / "jobs/ml/linked.yaml"]


def test_validate_builds_only_overlays_whose_inputs_changed(repo, spec, monkeypatch) -> None:
    built: list[Path] = []
    original = validate_module.build

    def counting(folder: Path) -> subprocess.CompletedProcess[str]:
        built.append(folder.relative_to(repo.root))
        return original(folder)

    monkeypatch.setattr(validate_module, "build", counting)
    write_specs(repo, spec, 2)
    write_tree(repo.root, render_tree(repo.root))
    validate_repository(repo.root)
    assert sorted(map(str, built)) == ["kustomize/base", "kustomize/overlays/all-accelerators"]
    built.clear()
    validate_repository(repo.root)
    assert built == []
    repo.write_spec("job-0", spec(pods=3))
    write_tree(repo.root, render_tree(repo.root))
    validate_repository(repo.root)
    assert list(map(str, built)) == ["kustomize/overlays/all-accelerators"]


def test_workers_of_a_cold_render_fill_the_cache(repo, spec, monkeypatch) -> None:
    """Render workers store what checks need in the cache themselves; the parent gets it
    from there when asked, and the bytes are those of a render in one process."""
    write_specs(repo, spec, 12, env={"B": "2"})
    monkeypatch.setattr(render_module, "PARALLEL_THRESHOLD", 4)
    parallel = render_tree(repo.root)
    monkeypatch.setattr(render_module, "PARALLEL_THRESHOLD", 10_000)
    alone = render_tree(repo.root, use_cache=False)
    assert parallel.files == alone.files
    assert dict(parallel.manifests) == dict(alone.manifests)
    assert [j.name for j in parallel.jobs] == [j.name for j in alone.jobs]
    rendered = count_renders(monkeypatch)
    assert dict(render_tree(repo.root).manifests) == dict(alone.manifests) and rendered == []


def test_inputs_linked_inside_the_repository_are_followed_for_freshness(repo, spec) -> None:
    """An env file or catalog file may be a link within the repository: a change to what it
    points at is a change (a link is never taken as fresh on its own)."""
    repo.write_spec("uses-env", spec(env_file="env/run.yaml"))
    real = repo.root / "jobs/ml/env/real.yaml"
    real.parent.mkdir()
    real.write_text("A: one\n")
    (real.parent / "run.yaml").symlink_to(real)
    assert "value: one" in render_tree(repo.root).files[f"{JOBS}/uses-env.yaml"]
    real.write_text("A: two\n")
    assert "value: two" in render_tree(repo.root).files[f"{JOBS}/uses-env.yaml"]
    images = repo.root / "platform/catalog/images.yaml"
    moved = repo.root / "platform/images.yaml"
    images.rename(moved)
    images.symlink_to(moved)
    before = render_tree(repo.root).files
    text = moved.read_text()
    digit = text.index("sha256:") + len("sha256:")
    moved.write_text(text[:digit] + ("1" if text[digit] == "0" else "0") + text[digit + 1:])
    after = render_tree(repo.root).files
    assert after != before and after == render_tree(repo.root, use_cache=False).files
