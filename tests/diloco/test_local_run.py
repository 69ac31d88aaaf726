"""`gkr run --local --diloco 2`: two learners, each a training run on its own local Ray (gloo,
an auxiliary teacher over ZeroMQ, checkpoints), and the synchroniser, all on loopback. The
learners' sample ledgers, judged together by `gkr ledger`, cover their one stream once."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.checkpoint.storage import CheckpointStore

ROOT = Path(__file__).resolve().parents[2]
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]


@pytest.mark.slow
def test_a_local_diloco_experiment_trains_both_learners_through_the_synchroniser(
        tmp_path: Path) -> None:
    done = subprocess.run(
        [*GKR, "run", "--local", "--diloco", "2", "examples/train/distill.yaml",
         "run.name=dl-test", "run.steps=40", "layout.max_world_size=1", "diloco.inner_steps=10",
         f"checkpoint.uri={tmp_path}/checkpoints", f"telemetry.dsn=chdb://{tmp_path}/telemetry"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "running examples/train/distill.yaml locally as a DiLoCo experiment" in out
    for round_ in range(1, 5):
        assert f"round {round_}: merged 2 learners (learner-0, learner-1)" in out
    for learner in ("learner-0", "learner-1"):
        assert re.search(rf"^\[{learner}\] step 40/40  loss \d\.\d{{5}}", out, re.MULTILINE)
        learner_checkpoints = CheckpointStore(f"{tmp_path}/checkpoints/learners/{learner}")
        assert learner_checkpoints.latest() == 40  # each learner keeps its own checkpoints
    assert CheckpointStore(f"{tmp_path}/checkpoints/synchroniser").latest() == 4
    assert "DiLoCo experiment dl-test finished: 2 learners" in out
    _judged_together(out, tmp_path / "telemetry")


def _judged_together(out: str, store: Path) -> None:
    """Each learner judges its own run (the other's shard unrecorded); `gkr ledger` over both
    runs, from both learners' folders, finds the stream trained exactly once."""
    runs = re.findall(r"\[learner-\d\] sample ledger: exactly once: .*?"
                      r"\(see `gkr ledger (\S+?)`\)", out)
    assert len(runs) == 2, out[-4000:]
    folders = [arg for learner in ("learner-0", "learner-1")
               for arg in ("--folder", str(store / "learners" / learner / "ledger"))]
    done = subprocess.run([*GKR, "ledger", *runs, *folders, "--dsn", f"chdb://{store}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"runs {runs[0]}, {runs[1]}: exactly once"), done.stdout
    assert "up to step 40" in done.stdout and "unrecorded" not in done.stdout
