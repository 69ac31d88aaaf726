"""Crash bundles without a training run: what goes in, the bounds on size and time, that
writing one never hides the run's own error, the code identity, and bundles on gs://."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from runtime.crash.bundle import Crash, bundling, write_bundle
from runtime.crash.code import identify
from runtime.crash.files import Folder
from runtime.crash.index import find_bundle, open_bundle
from runtime.crash.launch import Launch
from runtime.errors import RuntimeFailure
from runtime.run.config import TrainConfig, build_config
from tests.cli.test_gcs import BUCKET
from tests.crash.conftest import (
    RUN,
    config_for,
    driver_error,
    env_for_runs,
    gkr,
    rank_zero_raises,
    scratch_repo,
)


def test_a_bundle_holds_the_failure_the_ranks_reports_config_launch_code_and_queries(
        tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path / "repo")
    config = config_for(tmp_path / "bundles")
    rank_zero_raises(config)
    launch = Launch(str(repo / "train.yaml"), ("run.steps=6",), cwd=str(repo))
    uri = write_bundle(Crash(config, RUN, driver_error(), launch))
    assert uri == f"{tmp_path / 'bundles'}/{RUN}"
    bundle = open_bundle(uri)
    failure = bundle.manifest["failure"]
    assert failure["summary"] == "rank 0: teacher: RuntimeError: budget spent (max_requests=8)"
    ranks = {rank["rank"]: rank for rank in failure["ranks"]}
    assert ranks[0]["report"] == "ranks/rank-0.json" and ranks[0]["how"] == "failed"
    assert ranks[1]["how"] == "died" and ranks[1]["pid"] == 4242
    assert ranks[1]["ray_log"].endswith("ray-train-app-worker-1.log") and "report" not in ranks[1]
    report = json.loads(bundle.folder.read("ranks/rank-0.json"))
    assert report["identity"]["rank"] == 0 and report["identity"]["run"] == RUN
    assert "raise RuntimeFailure(" in report["exception"]["traceback"]
    assert report["log_tail"][-1].endswith("step 5: asking the teacher")
    names = bundle.folder.names()
    for part in ("failure.json", "config/resolved.yaml", "config/launch.json",
                 "config/train.yaml", "code/identity.json", "code/changes.patch",
                 "telemetry/queries.json", "telemetry/run_ranks.sql", "bundle.json"):
        assert part in names, names
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert bundle.manifest["code"]["commit"] == head and bundle.manifest["code"]["dirty"]
    assert b"+# tried locally" in bundle.folder.read("code/changes.patch")
    assert bundle.manifest["config"]["launch"]["overrides"] == ["run.steps=6"]
    for query in bundle.manifest["queries"]:
        assert query["file"] in names and f"-p run={RUN} " in query["command"]
        assert query["command"].endswith(f' -- "$(cat {query["file"]})"')


def test_a_bundle_stays_within_its_size_bound_and_lists_what_it_left_out(
        tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path / "repo")
    (repo / "train.yaml").write_text("x" * (3 << 20))  # a 3 MiB uncommitted change
    config = config_for(tmp_path / "bundles", max_bytes=1 << 20)
    uri = write_bundle(Crash(config, RUN, driver_error(), Launch(str(repo / "train.yaml"))))
    assert uri is not None
    bundle = open_bundle(uri)
    assert "code/changes.patch" in bundle.manifest["left_out"]
    assert any("only their hash" in problem for problem in bundle.manifest["problems"])
    assert bundle.manifest["code"]["changes_bytes"] > 3 << 20  # the hash still identifies it
    written = sum(size for name, size in bundle.folder.sizes().items() if name != "bundle.json")
    assert written <= 1 << 20


def test_writing_a_bundle_is_bounded_in_time(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    monkeypatch.setattr("runtime.crash.bundle._Bundle.write", lambda self: release.wait(600))
    config = config_for(tmp_path / "bundles", timeout_s=0.5)
    try:
        assert write_bundle(Crash(config, RUN, driver_error())) is None
    finally:
        release.set()


def test_a_bundle_that_cannot_be_written_never_hides_the_runs_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    config = config_for(blocker / "bundles")
    error = driver_error()
    lines: list[str] = []
    with pytest.raises(RuntimeFailure) as raised, bundling(config, RUN, lines.append):
        raise error
    assert raised.value is error and lines == []
    assert "not written" in caplog.text


def test_the_code_identity_takes_every_change_and_leaves_the_users_index_alone(
        tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path / "repo")
    (repo / "staged.py").write_text("STAGED = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "staged.py"], check=True)
    (repo / "new.py").write_text("NEW = 2\n")
    (repo / "data.bin").write_bytes(b"\0" * (2 << 20))
    (repo / ".gkr").mkdir()
    (repo / ".gkr" / "ignored.txt").write_text("ignored")
    index_before = subprocess.run(["git", "-C", str(repo), "diff", "--cached"],
                                  capture_output=True, check=True).stdout
    code, diff = identify(repo)
    assert b"STAGED = 1" in diff and b"NEW = 2" in diff and b"tried locally" in diff
    assert b"ignored" not in diff and code.left_out == ("data.bin",)
    assert subprocess.run(["git", "-C", str(repo), "diff", "--cached"], capture_output=True,
                          check=True).stdout == index_before


def test_outside_git_the_code_identity_says_so(tmp_path: Path) -> None:
    code, diff = identify(tmp_path)
    assert code.commit == "" and diff == b"" and "no git commit" in code.problems[0]


def test_gkr_runs_and_gkr_bundle_find_a_local_bundle(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path / "repo")
    config = build_config({"run": {"name": "crashy"}})  # bundles under .gkr/runs/crashy
    local = config.model_copy(update={"crash": config.crash.model_copy(
        update={"uri": str(repo / ".gkr/runs/crashy/bundles")})})
    write_bundle(Crash(local, RUN, driver_error(), Launch(str(repo / "train.yaml"))))
    assert find_bundle("crashy", repo).run == RUN  # a run name finds its newest bundle
    env = {"GKR_TELEMETRY_DSN": f"chdb://{tmp_path / 'empty-store'}"}
    listed = gkr(repo, "runs", env=_env(env), timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert RUN in listed.stdout and "Failed" in listed.stdout
    shown = gkr(repo, "bundle", RUN, env=_env(env), timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "rank 0: teacher: budget spent" in shown.stdout
    assert "code/changes.patch" in shown.stdout
    copied = gkr(repo, "bundle", "crashy", "--download", str(tmp_path / "copy"),
                 env=_env(env), timeout=300)
    assert copied.returncode == 0 and (tmp_path / "copy" / "bundle.json").is_file()
    missing = gkr(repo, "bundle", "nope", env=_env(env), timeout=300)
    assert missing.returncode == 1 and "no crash bundle of run 'nope'" in missing.stderr


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**env_for_runs(), **extra}


# --- gs:// --------------------------------------------------------------------------------

def test_a_bundle_is_written_to_and_read_from_gs(emulator: str, tmp_path: Path) -> None:
    uri = f"gs://{BUCKET}/runs/unit/bundles"
    rank_zero_raises(config_for_uri(uri))
    written = write_bundle(Crash(config_for_uri(uri), RUN, driver_error()))
    assert written == f"{uri}/{RUN}"
    bundle = open_bundle(written)
    assert bundle.manifest["failure"]["ranks"][0]["report"] == "ranks/rank-0.json"
    copied = Folder(written).download(tmp_path / "copy")
    assert "ranks/rank-0.json" in copied and (tmp_path / "copy" / "bundle.json").is_file()


def config_for_uri(uri: str) -> TrainConfig:
    return build_config({"run": {"name": "unit"}, "crash": {"uri": uri}})

