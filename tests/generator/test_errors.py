"""Every error, the generator's and the runtime's, has a category, and the category is the
exit code the README documents."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import typer

from generator.cli import _app
from generator.errors import (
    BadRequest,
    CheckFailed,
    GkrError,
    InvalidInput,
    Problem,
    StaleTree,
    ToolFailed,
)
from runtime.errors import Category, ConfigError, RuntimeFailure

REPO = Path(__file__).resolve().parents[2]

REPRESENTATIVES = [
    (InvalidInput([Problem("jobs/ml/a.yaml", 3, "gpus", "12 per pod, but a node has 8")]), 1),
    (BadRequest("--cluster 'nowhere': unknown; known: usc1-prod"), 1),
    (StaleTree("the rendered tree is stale"), 3),
    (ToolFailed("kubectl apply failed"), 4),
    (CheckFailed("preflight found a fault"), 5),
    (ConfigError("detection.interval_s", "must be > 0", "warden.yaml"), 1),
    (RuntimeFailure("Temporal at temporal-frontend.temporal:7233 is unreachable"), 4),
]


def _bare_raises(path: Path) -> list[int]:
    """Lines of `raise GkrError(...)` in one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "GkrError"]


def test_no_bare_gkr_error_is_raised_in_the_generator() -> None:
    found = {
        f"{path.relative_to(REPO).as_posix()}:{line}"
        for path in sorted((REPO / "generator").rglob("*.py"))
        for line in _bare_raises(path)
    }
    assert not found, f"raise a GkrError subclass (its category is the exit code): {found}"


def test_the_base_class_cannot_be_raised_itself() -> None:
    with pytest.raises(TypeError, match="subclass"):
        GkrError("which exit code?")


def test_readme_exit_codes_are_the_categories() -> None:
    table = dict(re.findall(r"^\| (\d) \| ([^|]+) \|$", (REPO / "README.md").read_text(), re.M))
    assert {int(code) for code in table} >= {int(c) for c in Category}
    assert "invalid input" in table["1"] and "stale" in table["3"]
    assert "service failed" in table["4"] and "found a fault" in table["5"]


@pytest.mark.parametrize(("error", "code"), REPRESENTATIVES,
                         ids=[type(e).__name__ for e, _ in REPRESENTATIVES])
def test_each_category_exits_with_its_documented_code(monkeypatch, capsys, error, code) -> None:
    failing = typer.Typer()

    @failing.command()
    def fail() -> None:
        raise error

    monkeypatch.setattr(_app, "app", failing)
    monkeypatch.setattr(sys, "argv", ["gkr"])
    with pytest.raises(SystemExit) as exited:
        _app.main()
    assert exited.value.code == code == int(error.category)
    assert str(error).splitlines()[0] in capsys.readouterr().err
