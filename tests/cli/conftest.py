"""Fixtures for the `gkr` command line: a committed copy of the repository as the working
directory, and the Kubernetes API test double behind a real kubeconfig (both from
tests/cluster/conftest.py); helpers to run `gkr` as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from generator.cli import app, main
from tests.cluster.conftest import CONTEXT, apiserver, repo  # noqa: F401  (fixtures)

# For test_gcs.py, before anything imports gcsfs (it reads this once, at import): its
# experimental zonal-bucket support waits a 60 s gRPC timeout per bucket on the emulator.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

NS = "team-llm"
SUBMIT = ["submit", "train-a", "rayjob", "--cluster", "usc1-prod", "--namespace", NS,
          "--owner", "tester@reve.ai", "--pods", "2", "--gpus", "8", "--accelerator", "H200",
          "--image", "trainer", "--cmd", "python -m runtime.train cfg.yaml"]


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def gkr(*args: str, stdin: str | None = None) -> Ran:
    """`gkr ARGS` in this process through its entry point (the error boundary included)."""
    runner = CliRunner()
    with runner.isolation(input=stdin) as (out, err, _):
        code = 0
        saved = sys.argv
        sys.argv = ["gkr", *args]
        try:
            main()
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1
        finally:
            sys.argv = saved
        sys.stdout.flush()
        sys.stderr.flush()
        return Ran(code, out.getvalue().decode(), err.getvalue().decode())


def gkr_process(*args: str, cwd: Path, env: dict[str, str] | None = None,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`gkr ARGS` in its own process, with pipes (not a terminal) as a script runs it."""
    command = [sys.executable, "-c", "from generator.cli import main; main()", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, input=stdin,
                          env={**os.environ, **(env or {})}, check=False, timeout=300)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


__all__ = ["CONTEXT", "NS", "SUBMIT", "Ran", "app", "gkr", "gkr_process"]
