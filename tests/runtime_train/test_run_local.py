"""`gkr run --local` end to end: a real local Ray, Ray Train workers with gloo, an auxiliary
encoder over ZeroMQ, and the FleetMonitor summaries; what a researcher sees of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.telemetry.store import Store
from runtime.telemetry.stragglers import analyze

ROOT = Path(__file__).resolve().parents[2]
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]


def _gkr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GKR, *args], cwd=ROOT, capture_output=True, text=True, timeout=540)


# Ray's own chatter that a local run must not show (it drowned the progress lines).
RAY_NOISE = ("PlacementGroupCleaner", "TrainingReport(", "TrainController", "core_worker.cc",
             "Token authentication", "DistributedDataParallel")


@pytest.mark.slow
def test_run_local_trains_and_shows_plan_progress_checkpoints_and_fleet(tmp_path: Path) -> None:
    store = f"chdb://{tmp_path}/telemetry"
    done = _gkr("run", "--local", "examples/train/tiny.yaml", "run.steps=20",
                "logging.fleet_every_steps=10", f"checkpoint.uri={tmp_path}",
                f"telemetry.dsn={store}", "telemetry.inject_delay={rank: 1, seconds: 0.05}")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "training: world size 2" in done.stdout
    assert "service teacher: 1 replica(s)" in done.stdout
    assert f"checkpoints: {tmp_path} (every 20 steps, keeping 2); starting at step 0" in out
    for step in (10, 20):
        assert re.search(rf"^step {step}/20  loss \d\.\d{{5}}  [\d,]+ samples/s$", done.stdout,
                         re.MULTILINE), done.stdout
    assert "step 20: checkpoint staged, committing in the background" in done.stdout
    assert "fleet step 10: teacher:" in done.stdout
    assert f"checkpoints: {tmp_path}: committed steps 20" in done.stdout
    final = next(line for line in done.stdout.splitlines() if "finished" in line)
    first, last = (float(part.split()[0]) for part in final.split("loss ")[1].split("-> "))
    assert last < first  # the student learns the teacher served over ZeroMQ
    fleet = next(line for line in done.stdout.splitlines() if line.startswith("fleet: teacher:"))
    assert "workers 1/1 healthy" in fleet  # as of the last step, not after the services stop
    assert not [noise for noise in RAY_NOISE if noise in out], out
    _check_telemetry(store, done.stdout)


def _check_telemetry(store: str, stdout: str) -> None:
    """Every rank's steps and all-reduces reached the store, with the run's identity, and the
    straggler analysis names the rank the run delayed."""
    run = re.search(r"see `gkr stragglers (\S+)`", stdout)
    assert run, stdout
    assert "telemetry: 40 step rows, 40 collective samples, 2 fleet summaries" in stdout
    with Store.connect(store) as telemetry:
        steps = telemetry.query("SELECT rank, count(), min(step), max(step), any(cluster) "
                                "FROM train_steps WHERE run = {run:String} GROUP BY rank "
                                "ORDER BY rank", {"run": run.group(1)}).rows
        assert steps == [(0, 20, 1, 20, "local"), (1, 20, 1, 20, "local")]
        recorded = telemetry.query("SELECT rank, countIf(profiling_name = 'gloo:all_reduce') "
                                   "FROM flight_recorder WHERE run = {run:String} GROUP BY rank "
                                   "ORDER BY rank", {"run": run.group(1)}).rows
        assert [rank for rank, all_reduces in recorded if all_reduces >= 20] == [0, 1]
        report = analyze(telemetry, run.group(1))
    assert [r.rank for r in report.persistent()] == [1]


@pytest.mark.slow
def test_a_failing_rank_is_reported_by_its_own_error_in_a_quiet_run() -> None:
    done = _gkr("run", "--local", "examples/train/tiny.yaml", "run.steps=2", "checkpoint=null",
                "+aux.services.teacher.options.no_such_option=1",
                "aux.services.teacher.max_restarts=0")
    assert done.returncode != 0
    assert re.search(r"failed: rank 0: service 'teacher': startup check failed", done.stderr)
    assert "no_such_option" in done.stderr
    assert "Traceback" not in done.stderr


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
