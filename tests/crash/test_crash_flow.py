"""From a crashed `gkr run --local` to an approved relaunch, with real runs (Ray Train, gloo,
the teacher over ZeroMQ, checkpoints, the telemetry store) and the scripted test agent
(tests/crash/scripted_test_agent.py) in place of an LLM agent.

One run crashes on a configuration mistake (the teacher's request budget, tests/crash/
teacher.py) at step 5, after checkpoints at steps 2 and 4. Its bundle is checked; a diagnosis
is rejected (nothing changes); a second one is approved: the fix lands on a new branch, the
user's checkout stays as it was, and the relaunch resumes from step 4 and finishes. Another
run loses a Ray Train worker to SIGKILL: the driver still writes the bundle.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from runtime.crash.index import find_bundle
from runtime.telemetry.store import Store, default_dsn
from tests.crash.conftest import GKR, TEST_AGENT, env_for_runs, git_state, gkr, scratch_repo

pytestmark = pytest.mark.slow
CREDENTIALS = {"GH_TOKEN": "ghp_test", "SSH_AUTH_SOCK": "/tmp/agent.sock",
               "KUBECONFIG": "/tmp/kubeconfig"}


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A scratch repository whose run crashed at step 5."""
    repo = scratch_repo(tmp_path_factory.mktemp("crash") / "repo")
    done = gkr(repo, "run", "--local", "train.yaml")
    assert done.returncode != 0, done.stdout[-3000:]
    found = re.search(r"^crash bundle: (\S+)$", done.stdout, re.MULTILINE)
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    return {"repo": repo, "uri": found.group(1), "out": done.stdout, "err": done.stderr}


def _run_id(crashed: dict[str, Any]) -> str:
    return str(crashed["uri"].rsplit("/", 1)[-1])


def test_the_crashed_run_left_a_bundle_with_every_part(crashed: dict[str, Any]) -> None:
    bundle = find_bundle("crashy", crashed["repo"])
    assert bundle.uri == crashed["uri"]
    manifest, names = bundle.manifest, bundle.folder.names()
    assert "options.max_requests=8" in manifest["failure"]["summary"]
    # Both ranks ask the teacher at step 5 and both are refused, but a rank whose refusal
    # comes after Ray Train has begun tearing the group down (the other rank failed first)
    # is stopped before it can write: every report the manifest lists is there and whole,
    # and the first failure's always is.
    reports = manifest["failure"]["reports"]
    assert reports and set(reports) <= {"ranks/rank-0.json", "ranks/rank-1.json"}, reports
    for name in reports:
        report = json.loads(bundle.folder.read(name))
        rank = int(name.removesuffix(".json").rsplit("-", 1)[1])
        assert report["identity"] == {**report["identity"], "run": _run_id(crashed),
                                      "rank": rank, "cluster": "local", "role": "worker"}
        assert "request budget spent" in report["exception"]["traceback"]
        assert f"flight_recorder/comm_lib_trace_rank_{rank}" in names, names
    for part in ("logs/rank-0.err", "logs/rank-1.err", "config/resolved.yaml",
                 "config/launch.json", "config/train.yaml", "code/identity.json",
                 "code/changes.patch", "telemetry/run_ranks.sql", "events.json"):
        assert part in names, names
    assert "step 4: checkpoint staged" in bundle.folder.read("logs/rank-0.err").decode()
    assert manifest["code"]["commit"] == git_state(crashed["repo"])["head"].strip()
    assert manifest["checkpoint"]["latest_step"] == 4
    events = json.loads(bundle.folder.read("events.json"))
    assert [e["reason"] for e in events] == ["Started"]


def test_gkr_runs_lists_the_failed_run_with_its_bundle(crashed: dict[str, Any]) -> None:
    listed = gkr(crashed["repo"], "runs", "-o", "json", timeout=300)
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["run"] == _run_id(crashed))
    assert row["state"] == "Failed" and row["bundle"] == crashed["uri"]


def _diagnose(crashed: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`gkr diagnose crashy` with the test agent, credentials in gkr's own environment."""
    env = {**env_for_runs(), **CREDENTIALS}
    done = gkr(crashed["repo"], "diagnose", "crashy", "--agent", TEST_AGENT, env=env,
               timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr  # the agent exits 3 on a credential
    return done


def test_without_approval_nothing_changes(crashed: dict[str, Any]) -> None:
    repo, run = crashed["repo"], _run_id(crashed)
    before = git_state(repo)
    checkpoints = sorted(p.name for p in (repo / ".gkr/runs/crashy/checkpoints").iterdir())
    proposed = _diagnose(crashed)
    assert "root cause: The teacher service is configured with a smoke-test" in proposed.stdout
    shown = gkr(repo, "diagnose", "show", run, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "state:       proposed" in shown.stdout
    assert "-        max_requests: 8\n+        max_requests: null" in shown.stdout
    assert "query run_ranks: rank 0 reached step 4, rank 1 reached step 4" in shown.stdout
    assert git_state(repo) == before  # the agent's fix lives in the bundle, not in the tree
    rejected = gkr(repo, "diagnose", "reject", run, "--reason", "test", timeout=300)
    assert rejected.returncode == 0 and "nothing was applied" in rejected.stdout
    assert git_state(repo) == before
    assert sorted(p.name for p in (repo / ".gkr/runs/crashy/checkpoints").iterdir()) == \
        checkpoints
    again = gkr(repo, "diagnose", "approve", run, "--yes", timeout=300)
    assert again.returncode == 1 and "was rejected already" in again.stderr
    assert _diagnosis_events(run)[-3:] == ["DiagnosisStarted", "DiagnosisProposed", "Rejected"]


def test_an_approved_fix_lands_on_a_branch_and_the_relaunch_resumes_and_finishes(
        crashed: dict[str, Any]) -> None:
    repo, run = crashed["repo"], _run_id(crashed)
    _diagnose(crashed)  # a new proposal after the rejected one
    before = git_state(repo)
    done = gkr(repo, "diagnose", "approve", run, "--yes")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert re.search(r"checkpoints: resuming from \S+/step-0000000004 \(step 4\)", done.stdout)
    assert "step 6/6" in done.stdout and "step 5/6" in done.stdout
    assert "approved and relaunched: run crashy finished" in done.stdout
    after = git_state(repo)
    assert {k: v for k, v in after.items() if k != "branches"} == \
        {k: v for k, v in before.items() if k != "branches"}
    assert f"gkr/diagnose-{run}" in after["branches"]
    fixed = _git(repo, "show", f"gkr/diagnose-{run}:train.yaml")
    assert "max_requests: null" in fixed and fixed.startswith("# tried locally")
    assert "max_requests: 8" in (repo / "train.yaml").read_text()  # the user's tree
    assert _diagnosis_events(run)[-3:] == ["DiagnosisProposed", "Approved", "Relaunched"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


def _diagnosis_events(run: str) -> list[str]:
    with Store.connect(default_dsn()) as store:
        rows = store.query("SELECT reason FROM events WHERE run = {run:String} AND "
                           "source = 'diagnose' ORDER BY ts", {"run": run}).rows
    return [reason for (reason,) in rows]


def test_a_bundle_is_written_when_a_worker_is_killed(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path / "repo")
    checkpoints = repo / ".gkr/runs/crashy/checkpoints"
    log = tmp_path / "run.log"
    with log.open("w") as output:  # a file, not a pipe: a full pipe would stall the run
        run = subprocess.Popen([*GKR, "run", "--local", "train.yaml", "run.steps=100000",
                                "aux.services.teacher.options.max_requests=null"], cwd=repo,
                               env=env_for_runs(), stdout=output, stderr=subprocess.STDOUT,
                               start_new_session=True)
        try:
            victim = _train_worker_once(run, checkpoints)
            os.kill(victim, signal.SIGKILL)  # the rank writes nothing of its own
            run.wait(timeout=300)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)  # the run and its local Ray
    out = log.read_text()
    assert run.returncode != 0, out[-3000:]
    bundle = find_bundle("crashy", repo)
    died = [r for r in bundle.manifest["failure"]["ranks"] if r.get("pid") == victim]
    assert died and died[0]["how"] == "died", bundle.manifest["failure"]
    rank = died[0]["rank"]
    assert f"logs/rank-{rank}.err" in bundle.folder.names()
    assert f"ranks/rank-{rank}.json" not in bundle.folder.names()
    assert f"crash bundle: {bundle.uri}" in out, out[-3000:]


def _train_worker_once(run: subprocess.Popen[bytes], checkpoints: Path) -> int:
    """The pid of a Ray Train worker of this run (a descendant of its `gkr` process: other
    Ray sessions may run on this machine), once a checkpoint is committed (the run trains;
    older checkpoints are pruned, so any committed one will do). Not one of the loader
    processes a worker forks, which carry its process title too."""
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and run.poll() is None:
        if any(checkpoints.glob("step-*/COMMITTED")):
            below = _descendants(run.pid)
            workers = [pid for pid, parent in below.items()
                       if _is_train_worker(pid) and not _is_train_worker(parent)]
            if workers:
                return min(workers)
        time.sleep(0.5)
    raise AssertionError(f"no training worker with a committed checkpoint: {run.poll()}")


def _is_train_worker(pid: int) -> bool:
    return b"RayTrainWorker" in _read(f"/proc/{pid}/cmdline")


def _descendants(root: int) -> dict[int, int]:
    """Every process below `root` and its parent, from /proc (field 4 of a process's stat)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _read(str(stat)).rsplit(b")", 1)[-1].split()
        if len(fields) > 2:
            parents[int(stat.parent.name)] = int(fields[1])
    found: dict[int, int] = {}
    frontier = {root}
    while frontier:
        children = {pid: parent for pid, parent in parents.items() if parent in frontier}
        found |= children
        frontier = set(children)
    return found


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:  # the process ended meanwhile
        return b""
