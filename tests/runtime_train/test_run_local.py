"""`gkr run --local` end to end: a real local Ray, Ray Train workers with gloo; the default
demo (the transformer on the stdlib under FSDP2, telemetry on), and the distillation example
whose auxiliary teacher fails; what a researcher sees of it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.telemetry.store import Store

ROOT = Path(__file__).resolve().parents[2]
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]


def _gkr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GKR, *args], cwd=ROOT, capture_output=True, text=True, timeout=540)


# Ray's own chatter that a local run must not show (it drowned the progress lines).
RAY_NOISE = ("PlacementGroupCleaner", "TrainingReport(", "TrainController", "core_worker.cc",
             "Token authentication", "DistributedDataParallel")


@pytest.mark.slow
def test_run_local_trains_the_demo_and_shows_plan_progress_checkpoints(tmp_path: Path) -> None:
    store = f"chdb://{tmp_path}/telemetry"
    done = _gkr("run", "--local", "examples/train/tiny.yaml", "run.steps=10", "run.log_every=5",
                f"checkpoint.uri={tmp_path}", "checkpoint.interval_steps=10",
                f"telemetry.dsn={store}")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "training: world size 2" in done.stdout
    assert re.search(r"^model runtime\.models\.transformer\.Transformer: [\d.]+M parameters$",
                     done.stdout, re.MULTILINE), done.stdout
    assert "mesh 1 replicate x 2 shard x 1 tensor = 2 ranks: FSDP" in done.stdout
    assert f"checkpoints: {tmp_path} (every 10 steps, keeping 2); starting at step 0" in out
    for step in (5, 10):
        assert re.search(rf"^step {step}/10  loss \d\.\d{{5}} nats/token  \d\.\d{{4}} bits/byte  "
                         r"[\d,]+ tokens/s$", done.stdout, re.MULTILINE), done.stdout
    assert "step 10: checkpoint staged, committing in the background" in done.stdout
    assert f"checkpoints: {tmp_path}: committed steps 10" in done.stdout
    final = next(line for line in done.stdout.splitlines() if "finished" in line)
    first, last = (float(part.split()[0]) for part in final.split("loss ")[1].split("-> "))
    assert last < first  # it learns the stdlib's bytes
    assert not [noise for noise in RAY_NOISE if noise in out], out
    _check_telemetry(store, done.stdout)


def _check_telemetry(store: str, stdout: str) -> None:
    """Every rank's steps (8 windows of 128 tokens each) and FSDP2's all-gathers reached the
    store, with the run's identity."""
    run = re.search(r"see `gkr stragglers (\S+)`", stdout)
    assert run, stdout
    assert "telemetry: 20 step rows" in stdout
    with Store.connect(store) as telemetry:
        steps = telemetry.query("SELECT rank, count(), min(step), max(step), any(cluster), "
                                "max(tokens) FROM train_steps WHERE run = {run:String} "
                                "GROUP BY rank ORDER BY rank", {"run": run.group(1)}).rows
        assert steps == [(0, 10, 1, 10, "local", 1024), (1, 10, 1, 10, "local", 1024)]
        recorded = telemetry.query("SELECT rank, countIf(profiling_name = 'gloo:all_gather') "
                                   "FROM flight_recorder WHERE run = {run:String} GROUP BY rank "
                                   "ORDER BY rank", {"run": run.group(1)}).rows
        assert [rank for rank, gathers in recorded if gathers >= 10] == [0, 1]


@pytest.mark.slow
def test_a_failing_rank_is_reported_by_its_own_error_in_a_quiet_run() -> None:
    done = _gkr("run", "--local", "examples/train/distill.yaml", "run.steps=2", "checkpoint=null",
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
