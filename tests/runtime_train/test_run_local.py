"""`gkr run --local` end to end: a real local Ray, Ray Train workers with gloo, an auxiliary
encoder over ZeroMQ, and the FleetMonitor summaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]


def _gkr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GKR, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_run_local_trains_and_reports_plan_and_fleet(tmp_path: Path) -> None:
    done = _gkr("run", "--local", "examples/train/tiny.yaml", "run.steps=20",
                "logging.fleet_every_steps=10", f"checkpoint.uri={tmp_path}")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert f"checkpoints: {tmp_path} (every 20 steps, keeping 2); starting at step 0" in out
    assert f"checkpoints: {tmp_path}: committed steps 20" in done.stdout
    assert "training: world size 2" in out
    assert "service teacher: 1 replica(s)" in out
    assert "fleet step 10: teacher:" in out
    final = next(line for line in done.stdout.splitlines() if "finished" in line)
    first, last = (float(part.split()[0]) for part in final.split("loss ")[1].split("-> "))
    assert last < first  # the student learns the teacher served over ZeroMQ
    assert "fleet: teacher:" in done.stdout


def test_run_local_reports_a_bad_override_without_traceback() -> None:
    done = _gkr("run", "--local", "examples/train/tiny.yaml", "run.stepz=3")
    assert done.returncode == 1
    assert "run.stepz" in done.stderr
    assert "Traceback" not in done.stderr


def test_run_without_local_is_refused() -> None:
    done = _gkr("run", "examples/train/tiny.yaml")
    assert done.returncode == 1
    assert "--local" in done.stderr


def _repo_with_spec(tmp_path: Path, cmd: str) -> Path:
    for folder in ("clusters", "platform/catalog", "jobs/demo"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "jobs/demo/tiny.yaml").write_text((ROOT / "examples/train/tiny.yaml").read_text())
    spec = tmp_path / "jobs/demo/distil.yaml"
    spec.write_text(f"kind: rayjob\ncluster: local\nowner: a@b.io\nimage: trainer\ncmd: {cmd}\n")
    return spec


def test_job_spec_cmd_gives_the_config_and_overrides(tmp_path: Path) -> None:
    from generator.cli.run import _training_command

    spec = _repo_with_spec(tmp_path, "python -m runtime.train tiny.yaml run.steps=3")
    config, overrides = _training_command(spec)
    assert config == spec.parent / "tiny.yaml"
    assert overrides == ["run.steps=3"]


def test_job_spec_without_runtime_train_is_refused(tmp_path: Path) -> None:
    spec = _repo_with_spec(tmp_path, "python serve.py")
    done = _gkr("run", "--local", str(spec))
    assert done.returncode == 1
    assert "does not run `python -m runtime.train" in done.stderr
