"""Helpers of the crash tests: a committed scratch repository holding a training config whose
teacher crashes the run (tests/crash/teacher.py), and `gkr` run as a user runs it."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.crash.capture import rank_failures
from runtime.errors import RuntimeFailure
from runtime.run.config import TrainConfig, build_config

# gcsfs reads this once, at import (see tests/cli/conftest.py): the GCS emulator has no
# zonal buckets, and asking costs a 60 s timeout per bucket.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

from tests.cli.test_gcs import emulator  # noqa: F401  (the GCS emulator, a fixture)
from tests.cluster.conftest import commit_all

ROOT = Path(__file__).resolve().parents[2]
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]
TEST_AGENT = shlex.join([sys.executable, str(ROOT / "tests/crash/scripted_test_agent.py")])
RUN_TIMEOUT_S = 540  # a real local run takes ~40 s here; the 2-core machine is shared

# Two CPU ranks distil the test teacher, which serves 8 requests (4 steps of 2 ranks) and
# then refuses: the run checkpoints at steps 2 and 4 and crashes at step 5 of 6.
TRAIN_YAML = """\
defaults:
  - gkr_defaults
  - layout: cpu
  - model: mlp
  - aux@aux.services.teacher: encoder
  - _self_

run:
  name: crashy
  steps: 6
  log_every: 1
  local_cpus: 4
task:
  _target_: runtime.tasks.distill.Distillation
  target_service: teacher
  input_dim: ${model.input_dim}
  output_dim: ${model.output_dim}
layout:
  max_world_size: 2
  dp_shard: 1  # every rank a whole replica: DDP
  dp_replicate: -1
aux:
  services:
    teacher:
      impl: tests.crash.teacher:BudgetedTeacher
      gpus_per_worker: 0.0
      ratio: 2
      options:
        max_requests: 8
data:
  datasets:
    - name: features
      _target_: runtime.data.synthetic.SyntheticFeatures
      length: 4096
      dim: "${model.input_dim}"
  batch_size: 64
  producers: 1
  start_method: fork
checkpoint:
  uri: .gkr/runs/${run.name}/checkpoints
  interval_steps: 2
  keep_last: 3
logging:
  fleet_every_steps: 0
"""


def scratch_repo(folder: Path) -> Path:
    """A committed repository with the crashing config, plus one uncommitted change (the
    bundle must carry it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".gitignore").write_text(".gkr/\n")
    (folder / "train.yaml").write_text(TRAIN_YAML)
    commit_all(folder, "initial")
    (folder / "train.yaml").write_text("# tried locally\n" + TRAIN_YAML)
    return folder


def env_for_runs() -> dict[str, str]:
    """The environment of the `gkr` processes: the test teacher must be importable by Ray's
    workers, which start in folders of their own."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def gkr(cwd: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`gkr ARGS` in `cwd`, as a separate process."""
    return subprocess.run([*GKR, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env or env_for_runs(), check=False)


def git_state(repo: Path) -> dict[str, str]:
    """What a user's checkout is: HEAD, branches, index and working tree."""
    def run(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=True).stdout
    return {"head": run("rev-parse", "HEAD"), "branches": run("branch", "--list", "-v"),
            "status": run("status", "--porcelain", "--untracked-files=all"),
            "index": run("diff", "--cached"), "tree": run("diff"),
            "worktrees": run("worktree", "list", "--porcelain")}


# --- a failure without a training run ------------------------------------------------------

RUN = "unit-abc123"  # a run id as the driver makes them


class WorkerGroupFailure(Exception):
    """Stands in for Ray Train's WorkerGroupError, which only Ray Train builds: the same
    `worker_failures` mapping of rank to exception that the bundle reads."""

    def __init__(self, failures: dict[int, BaseException]) -> None:
        super().__init__("Training failed due to worker errors")
        self.worker_failures = failures


DIED = ("A worker health check failed.\nThe actor died unexpectedly before finishing this "
        "task.\n\tpid=4242\n  log_file_path='/tmp/ray/x/logs/train/ray-train-app-worker-1.log'")


def config_for(root: Path, **crash: Any) -> TrainConfig:
    return build_config({"run": {"name": "unit"}, "crash": {"uri": str(root), **crash}})


def driver_error(run: str = RUN) -> RuntimeFailure:
    """The driver's error as `_fit` raises it: a RuntimeFailure caused by Ray Train's."""
    ray_error = WorkerGroupFailure({0: RuntimeFailure("teacher: budget spent"),
                                    1: RuntimeError(DIED)})
    error = RuntimeFailure(f"training run {run} failed: rank 0: teacher: budget spent")
    error.__cause__ = ray_error
    return error


def rank_zero_raises(config: TrainConfig, run: str = RUN) -> None:
    """Rank 0's part: it raises inside the loop and writes its own report."""
    logging.getLogger("runtime.train.loop").warning("about to fail at step 5")
    with pytest.raises(RuntimeFailure), rank_failures(config, run, rank=0):
        logging.getLogger("runtime.train.loop").warning("step 5: asking the teacher")
        raise RuntimeFailure("teacher: RuntimeError: budget spent (max_requests=8)")
