"""The pull-request pipeline (.github/workflows) and `make test` cannot drift: every make
target a workflow step runs is one `make test` runs too (or the set-up), and the comment's
Markdown builds from a real git history."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def _make_targets_of_steps() -> set[str]:
    targets = set()
    for workflow in WORKFLOWS:
        for job in yaml.safe_load(workflow.read_text())["jobs"].values():
            for step in job["steps"]:
                for line in str(step.get("run", "")).splitlines():
                    if found := re.match(r"\s*make\s+([\w-]+)", line):
                        targets.add(found.group(1))
    return targets


def _prerequisites(target: str) -> set[str]:
    rule = re.search(rf"^{target}:([^\n=]*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert rule, f"the Makefile has no rule {target}"
    return set(rule.group(1).split())


def test_every_pipeline_step_is_a_target_make_test_runs() -> None:
    """`make images` (the main workflow's push to the real registry) is the one exception:
    `make test` runs the same `gkr images build` against a local registry
    (tests/test_images.py)."""
    steps = _make_targets_of_steps()
    assert {"check", "lint", "security", "pr-diff", "images"} <= steps, steps
    assert steps - {"setup", "images"} <= _prerequisites("test")
    recipe = (ROOT / "Makefile").read_text().split("\nimages:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/gkr images build" in recipe
    assert '"images", "build"' in (ROOT / "tests/test_images.py").read_text()


def test_the_comment_shows_the_rendered_change_against_the_base(tmp_path: Path) -> None:
    """A scratch clone whose branch changes one rendered manifest: the comment names the file
    and shows the line; against its own HEAD it says there is no change."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(clone)],
                   check=True)
    (clone / ".venv").symlink_to(ROOT / ".venv")
    shutil.copy2(ROOT / "tools" / "pr-diff.sh", clone / "tools")  # this checkout's script
    manifest = next((clone / "kustomize").rglob("*.yaml"))
    same = subprocess.run(["tools/pr-diff.sh", "HEAD"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout
    assert "No change to the rendered tree against `HEAD`" in same
    manifest.write_text(manifest.read_text() + "# a reviewer sees this line\n")
    changed = subprocess.run(["tools/pr-diff.sh", "HEAD"], cwd=clone, capture_output=True,
                             text=True, check=True).stdout
    assert str(manifest.relative_to(clone)) in changed
    assert "+# a reviewer sees this line" in changed
    missing = subprocess.run(["tools/pr-diff.sh", "no-such-ref"], cwd=clone,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "git fetch" in missing.stderr
