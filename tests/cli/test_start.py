"""A fast start: `gkr --help`, `-h`, `--version` and TAB completion load no heavy library,
and work without `git` on PATH (GitPython raises at import when git is missing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli.conftest import SUBMIT, gkr_process

ROOT = Path(__file__).resolve().parents[2]
# Imported only inside the commands that use them.
HEAVY = ("rich", "pydantic", "jinja2", "git", "kubernetes", "temporalio", "torch", "ray",
         "hcl2", "lark", "ruamel", "fsspec", "jsonschema", "generator.catalog", "generator.spec",
         "generator.render", "generator.cluster", "runtime.pods")


def _loaded_after(code: str) -> list[str]:
    """Heavy top-level packages in sys.modules after running `code` in a fresh interpreter."""
    probe = (f"import sys\n{code}\n"
             f"print('loaded:', *(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                          text=True, check=True, timeout=120)
    return done.stderr.split("loaded:")[-1].split()


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import generator.cli") == []


def test_help_loads_only_what_the_help_screen_needs() -> None:
    code = ("from generator.cli import app\n"
            "try:\n    app(['--help'])\nexcept SystemExit:\n    pass")
    assert _loaded_after(code) == []  # plain help, as kubectl's: no Rich either


def test_help_version_and_short_help() -> None:
    for args in (["--help"], ["-h"], ["submit", "-h"], ["warden", "status", "-h"]):
        shown = gkr_process(*args, cwd=ROOT)
        assert shown.returncode == 0 and "Usage" in shown.stdout, (args, shown.stderr)
    version = gkr_process("--version", cwd=ROOT)
    assert version.returncode == 0 and version.stdout.startswith("gkr ")


def test_tab_completion_lists_commands_and_clusters() -> None:
    def complete(words: str) -> list[str]:
        env = {"_GKR_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}
        done = subprocess.run([sys.executable, "-c", "from generator.cli import main; main()"],
                              cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                              text=True, check=False, timeout=120)
        return done.stdout.split()

    assert "status" in complete("gkr sta")
    assert complete("gkr list --cluster usc") == ["usc1-prod"]


def test_without_git_on_path_help_works_and_git_commands_say_why(repo, tmp_path) -> None:
    bare = tmp_path / "bin"  # a PATH with no git on it
    bare.mkdir()
    env = {"PATH": str(bare), "GIT_PYTHON_GIT_EXECUTABLE": ""}
    env_without = {k: v for k, v in os.environ.items() if k != "GIT_PYTHON_GIT_EXECUTABLE"}
    assert gkr_process("--help", cwd=repo, env={**env_without, **env}).returncode == 0
    code = repo / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    shipped = gkr_process(*SUBMIT, "--working-dir", str(code), "--dry-run", cwd=repo,
                          env={**env_without, **env})
    assert shipped.returncode == 4, shipped.stderr
    assert shipped.stderr.startswith("error: --working-dir") and "needs git" in shipped.stderr
    assert "Traceback" not in shipped.stderr
