"""`gkr run --local` with torchft switched on: the distillation example as replica groups of
local processes, the Lighthouse in the driver, the teacher service shared by the groups."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]


@pytest.mark.slow
def test_run_local_trains_the_demo_as_torchft_replica_groups(tmp_path: Path) -> None:
    done = subprocess.run(
        [*GKR, "run", "--local", "examples/train/distill.yaml", "run.steps=20",
         "fault_tolerance.enabled=true", f"checkpoint.uri={tmp_path}", "telemetry.enabled=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "training: world size 2 (multiple of 2)" in done.stdout
    assert re.search(r"^fault tolerance: 2 replica groups of 1 rank\(s\), Lighthouse at "
                     r"http://\S+:\d+; training goes on while at least 1 group\(s\)",
                     done.stdout, re.MULTILINE), done.stdout
    assert re.search(r"^step 20/20  loss \d\.\d{5}", done.stdout, re.MULTILINE), done.stdout
    assert f"checkpoints: {tmp_path}: committed steps 20" in done.stdout
    marker = json.loads((tmp_path / "step-0000000020" / "COMMITTED").read_text())
    assert marker["world_size"] == 1  # one group of one rank saved it: the lowest one
    assert marker["run"] in done.stdout  # a restarted group finds its own run's checkpoints
    assert "fleet: teacher:" in done.stdout  # one teacher service, shared by both groups
    assert "torchft::" not in out  # torchft's per-quorum INFO lines stay quiet
    assert "Traceback" not in out
