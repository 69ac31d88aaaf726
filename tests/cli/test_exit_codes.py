"""Exit codes exactly as the README's table: a declined or closed prompt is 130, a usage
error 2, a `submit --wait` that sees no preflight result in time 4."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli.conftest import NS, SUBMIT, gkr

README = Path(__file__).resolve().parents[2] / "README.md"


def _table() -> dict[int, str]:
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|$", README.read_text(), re.M)
    return {int(code): meaning for code, meaning in rows}


def test_the_readme_documents_every_code_gkr_uses() -> None:
    table = _table()
    assert set(table) == {0, 1, 2, 3, 4, 5, 130}
    assert "prompt" in table[130] and "Ctrl-C" in table[130]
    assert "timed out" in table[4]


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["declined", "end-of-input"])
def test_a_declined_or_closed_prompt_exits_130(repo, apiserver, answer) -> None:
    made = gkr("submit", "-f", "jobs/llm/llm-dev.yaml", "--cluster", "usc1-prod",
               "--accelerator", "H200")
    assert made.code == 0, made.err
    shown = gkr("delete", "llm-dev", "--cluster", "usc1-prod", "-n", NS, "--raycluster",
                stdin=answer)
    assert shown.code == 130, shown.err
    assert apiserver.get("ray.io", "rayclusters", NS, "llm-dev") is not None


def test_usage_errors_exit_2(repo) -> None:
    for args in (["no-such-command"], ["list", "--no-such-flag"], ["submit", "x", "notakind"]):
        assert gkr(*args).code == 2, args


def test_a_preflight_wait_that_times_out_exits_4(repo, apiserver) -> None:
    shown = gkr(*SUBMIT, "--wait", "--timeout", "1")  # no KubeRay, no Warden: no result
    assert shown.code == 4 and "no preflight result after 1 s" in shown.err, shown.err
    assert apiserver.get("ray.io", "rayjobs", NS, "train-a") is not None  # the job goes on
