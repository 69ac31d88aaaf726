"""`gkr diff` and `gkr render --check` print a diff that `git apply` takes as it is when
piped: no line is wrapped or cut at 80 columns."""

from __future__ import annotations

import subprocess

from tests.cli.conftest import gkr_process

LONG = "uv run python -m runtime.train configs/pretrain_7b.yaml " + " ".join(
    f"model.layer_{i}.width={4096 + i}" for i in range(12))


def test_a_piped_diff_is_complete_and_applies(repo) -> None:
    spec = repo / "jobs/llm/llm-pretrain-7b.yaml"
    text = spec.read_text()
    spec.write_text("\n".join(f"cmd: {LONG}" if line.startswith("cmd:") else line
                              for line in text.splitlines()) + "\n")
    shown = gkr_process("diff", cwd=repo)
    assert shown.returncode == 0, shown.stderr
    assert len(LONG) > 200 and any(LONG in line and line.startswith("+")
                                   for line in shown.stdout.splitlines())
    assert "\x1b[" not in shown.stdout  # no colour codes in a pipe
    checked = gkr_process("render", "--check", cwd=repo)
    assert checked.returncode == 3 and checked.stdout == shown.stdout
    assert checked.stderr.startswith("error:") and "stale" in checked.stderr
    applies = subprocess.run(["git", "apply", "--check"], cwd=repo, input=shown.stdout,
                             text=True, capture_output=True, check=False)
    assert applies.returncode == 0, applies.stderr
    subprocess.run(["git", "apply"], cwd=repo, input=shown.stdout, text=True, check=True)
    assert gkr_process("render", "--check", cwd=repo).returncode == 0
    assert gkr_process("diff", "--exit-code", cwd=repo).returncode == 0
