"""What `gkr COMMAND` costs before the command runs: Typer builds only the invoked command,
and options left unset are not coerced through pydantic. Work is counted (modules imported,
commands built), never timed; what users see (help, errors, suggestions) is unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import typer.main

from tests.cli.conftest import app, gkr

PROBE = """
import json, sys
import typer.main
built = []
original = typer.main.get_command_from_info
def counting(command_info, **options):
    built.append(command_info.callback.__name__)
    return original(command_info, **options)
typer.main.get_command_from_info = counting
from generator.cli import main
try:
    main()
finally:
    print(json.dumps({"modules": sorted(sys.modules), "built": built}), file=sys.stderr)
"""


def probe(root: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=root, capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_a_render_with_nothing_to_render_builds_one_command_and_no_pydantic(repo) -> None:
    assert gkr("render").code == 0
    seen = probe(repo, "render")
    assert seen["built"] == ["render"]
    assert not {"pydantic", "typer._adapters"} & set(seen["modules"])
    seen = probe(repo, "render", "--root", str(repo))  # a given option is still coerced
    assert seen["built"] == ["render"]


def test_help_errors_and_suggestions_see_every_command(repo) -> None:
    everything = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    listed = gkr("--help").out
    assert all(name in listed for name in everything)
    assert "Did you mean 'render'" in gkr("rendr").err
    ran = gkr("render", "--bogus")
    assert ran.code == 2 and "Usage: gkr render" in ran.err and "--bogus" in ran.err
    assert "Render every job spec" in gkr("render", "-h").out
    assert set(typer.main.get_command(app).commands) == everything  # type: ignore[attr-defined]
