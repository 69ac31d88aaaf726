"""Spec discovery (`generator.placement.spec_files`) vets the regular files it walks past
itself, without `refusal` (every render lists every spec): whatever it accepts, `refusal`
accepts, and whatever else it finds is refused for the same reason `refusal` gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generator.errors import InvalidInput
from generator.placement import spec_files
from generator.yamlio import MAX_BYTES, refusal


def outcome(root: Path, paths: list[Path] | None = None) -> tuple[list[Path], set[tuple]]:
    try:
        return spec_files(root, paths), set()
    except InvalidInput as error:
        return [], {(p.file, p.message) for p in error.problems}


@pytest.fixture
def hostile(repo, tmp_path_factory) -> Path:
    """A jobs/ folder with good specs and every kind of odd entry beside them."""
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret.yaml").write_text("password: hunter2\n")
    (outside / "team").mkdir()
    (outside / "team" / "x.yaml").write_text("kind: job\n")
    team = repo.root / "jobs/ml"
    team.mkdir(parents=True)
    (team / "good.yaml").write_text("kind: job\n")
    (team / "big.yaml").write_bytes(b"#" * (MAX_BYTES + 1))
    (team / "folder.yaml").mkdir()
    (team / "out.yaml").symlink_to(outside / "secret.yaml")
    (team / "in.yaml").symlink_to(team / "good.yaml")
    (team / "dangling.yaml").symlink_to(team / "gone.yaml")
    (team / "loop.yaml").symlink_to(team / "loop.yaml")
    os.mkfifo(team / "fifo.yaml")
    (repo.root / "jobs/linked-team").symlink_to(outside / "team")
    return outside


def test_every_accepted_spec_is_one_refusal_accepts(repo, hostile) -> None:
    found, problems = outcome(repo.root)
    assert found == []
    expected = {
        "jobs/linked-team": "a symbolic link to a folder; gkr does not follow it",
        "jobs/ml/big.yaml": f"{MAX_BYTES + 1} bytes; an input file may have at most {MAX_BYTES}",
        "jobs/ml/folder.yaml": "a directory, not a file",
        "jobs/ml/out.yaml": refusal(repo.root / "jobs/ml/out.yaml", repo.root),
        "jobs/ml/dangling.yaml": "a symbolic link to a missing file",
        "jobs/ml/loop.yaml": refusal(repo.root / "jobs/ml/loop.yaml", repo.root),
        "jobs/ml/fifo.yaml": "not a regular file",
    }
    assert problems == set(expected.items())
    assert "out of the repository" in expected["jobs/ml/out.yaml"]
    for name in ("big", "folder", "out", "dangling", "loop", "fifo"):
        target = repo.root / f"jobs/ml/{name}.yaml"
        if target.is_dir():
            target.rmdir()
        else:
            target.unlink()
    (repo.root / "jobs/linked-team").unlink()
    assert outcome(repo.root) == ([repo.root / "jobs/ml/good.yaml",
                                   repo.root / "jobs/ml/in.yaml"], set())


def test_a_root_reached_through_a_link_finds_the_same_specs(repo, tmp_path_factory) -> None:
    repo_link = tmp_path_factory.mktemp("link") / "via-link"
    repo_link.symlink_to(repo.root)
    (repo.root / "jobs/ml").mkdir(parents=True)
    (repo.root / "jobs/ml/a.yaml").write_text("kind: job\n")
    assert outcome(repo_link) == ([repo_link / "jobs/ml/a.yaml"], set())
    assert outcome(repo_link, [repo_link / "jobs/ml"]) == ([repo_link / "jobs/ml/a.yaml"], set())


def test_a_jobs_folder_linked_out_of_the_repository_is_refused(repo, tmp_path_factory) -> None:
    """A named folder below a linked jobs/ is walked, but what it holds resolves outside."""
    outside = tmp_path_factory.mktemp("elsewhere")
    (outside / "ml").mkdir(parents=True)
    (outside / "ml/a.yaml").write_text("kind: job\n")
    (repo.root / "jobs").symlink_to(outside)
    found, problems = outcome(repo.root, [repo.root / "jobs/ml"])
    assert found == [] and problems == {
        ("jobs/ml/a.yaml",
         "a symbolic link out of the repository; gkr reads inputs only from inside it")}
    assert outcome(repo.root)[1] == {
        ("jobs", "not a spec: gkr render reads specs only from jobs/<team>/<name>.yaml")}


def test_specs_are_in_path_order(repo) -> None:
    """`Path` order (by parts), not string order: `ml/x` before `ml-b/x`."""
    for team in ("ml-b", "ml", "a"):
        (repo.root / "jobs" / team).mkdir(parents=True)
        (repo.root / "jobs" / team / "x.yaml").write_text("kind: job\n")
    found, _ = outcome(repo.root)
    assert found == sorted(found) and [p.parent.name for p in found] == ["a", "ml", "ml-b"]
