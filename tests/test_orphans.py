"""No process outlives a SIGKILLed parent (runtime.procs): each kind of parent is started in a
subprocess, waits (blocked) once its children exist, and is killed; every descendant must be
gone within a bounded poll. A control shows the render test finds the survivors of a render
whose workers do not set the death signal.

Processes are read from /proc (Linux only, as the death signal is)."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="parent-death signals are Linux's")

REPO = Path(__file__).resolve().parents[1]
DEADLINE_S = 60.0
READY = "ready"
# Each parent runs one of these, then blocks on stdin until it is killed.
BLOCK = "print('ready', flush=True); sys.stdin.read()"
T = TypeVar("T")
Proc = tuple[int, int]  # (pid, start time): a pid reused meanwhile is another process


def _stat(pid: int) -> list[str] | None:
    """The fields after the name in /proc/PID/stat (proc(5)), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _processes() -> dict[Proc, int]:
    """Every live process, with its parent's pid (zombies count as gone)."""
    found = {}
    for entry in Path("/proc").iterdir():
        fields = _stat(int(entry.name)) if entry.name.isdigit() else None
        if fields and fields[0] != "Z":
            found[(int(entry.name), int(fields[19]))] = int(fields[1])
    return found


def _descendants(pid: int) -> set[Proc]:
    table, found, frontier = _processes(), set[Proc](), {pid}
    while frontier:
        below = {proc for proc, parent in table.items() if parent in frontier} - found
        found |= below
        frontier = {proc[0] for proc in below}
    return found


def _poll(check: Callable[[], T | None], what: str) -> T:
    """check()'s first true result, polled until the deadline (no fixed wait)."""
    deadline = time.monotonic() + DEADLINE_S
    while not (result := check()):
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S:g} s"
        time.sleep(0.05)
    return result


def _start(code: str, *args: str) -> subprocess.Popen[str]:
    """A parent running `code` (which ends with BLOCK), once it printed READY."""
    parent = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    # A selector, not select(): a long test process may hold descriptors past select's 1024.
    with selectors.DefaultSelector() as selector:
        selector.register(parent.stdout, selectors.EVENT_READ)
        ready = selector.select(DEADLINE_S)
    line = parent.stdout.readline() if ready else ""
    if line.strip() != READY:
        parent.kill()
        pytest.fail(f"the parent did not get ready (exit {parent.wait()}): {line!r}")
    return parent


def _kill(parent: subprocess.Popen[str], at_least: int,
          grace_s: float = DEADLINE_S) -> set[Proc]:
    """SIGKILL the parent once it has `at_least` descendants; those alive `grace_s` after."""
    def enough() -> set[Proc] | None:
        found = _descendants(parent.pid)
        return found if len(found) >= at_least else None

    children = _poll(enough, f"{at_least} children")
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + grace_s
    while (alive := children & set(_processes())) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def _stop_stages(parent: int) -> None:
    """SIGSTOP the descendants but multiprocessing's resource tracker (which ends when every
    holder of its pipe has), as a stage stuck in a read would be: the stages' own check of
    their rank (runtime.data.stages) then never runs, and only the death signal ends them."""
    for pid, _ in _descendants(parent):
        if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGSTOP)


def _describe(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:80]
    except OSError:
        return f"{pid} (gone)"
    state = (_stat(pid) or ["gone"])[0]
    return f"{pid} ({state}) {command.decode(errors='replace')}"


def _assert_no_survivor(parent: subprocess.Popen[str], at_least: int) -> None:
    alive = _kill(parent, at_least)
    found = [_describe(pid) for pid, _ in alive]
    for pid, _ in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"{len(alive)} processes outlived their SIGKILLed parent: {found}"


RENDER = f"""
import sys
import generator.render as render
import runtime.procs
if sys.argv[2] == "untied":  # the control: workers as they were
    runtime.procs.die_with_parent = lambda: None
render.PARALLEL_THRESHOLD = 4
def meanwhile(*args, **kwargs):  # the parent waits here while its workers render
    {BLOCK}
render._catalog_part = meanwhile
from generator.cli import main
sys.argv = ["gkr", "render", "--root", sys.argv[1]]
main()
"""


def _scratch(root: Path, specs: int) -> Path:
    shutil.copytree(REPO / "platform/catalog", root / "platform/catalog")
    (root / "clusters").mkdir()
    shutil.copy(REPO / "tests/generator/data/all-accelerators.yaml", root / "clusters")
    jobs = root / "jobs/ml"
    jobs.mkdir(parents=True)
    for i in range(specs):
        (jobs / f"job-{i}.yaml").write_text(yaml.safe_dump({
            "kind": "rayjob", "cluster": "all-accelerators", "owner": "alice@reve.ai",
            "pods": 1 + i % 2, "accelerator": "H200", "image": "trainer",
            "cmd": "python -m runtime.train configs/tiny.yaml"}))
    return root


needs_two_cores = pytest.mark.skipif((os.cpu_count() or 1) < 2,
                                     reason="gkr render forks workers from two cores on")


@needs_two_cores
def test_a_killed_render_leaves_no_worker(tmp_path: Path) -> None:
    root = _scratch(tmp_path, 12)
    _assert_no_survivor(_start(RENDER, str(root), "tied"), at_least=2)


@needs_two_cores
def test_the_control_render_without_the_death_signal_leaves_its_workers(
        tmp_path: Path) -> None:
    """What the render test would find before the fix: its check sees survivors. Their
    grace is short: untied workers never end, so a loaded machine cannot change the result."""
    root = _scratch(tmp_path, 12)
    alive = _kill(_start(RENDER, str(root), "untied"), at_least=2, grace_s=2.0)
    for pid, _ in alive:
        os.kill(pid, signal.SIGKILL)
    assert len(alive) >= 2


PIPELINE = f"""
import sys
from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline
config = DataConfig.model_validate({{
    "datasets": [{{"name": "a", "_target_": "runtime.data.synthetic.SyntheticImages",
                  "length": 64, "size": 8}}],
    "batch_size": 4, "chunk_size": 2, "producers": 1, "collators": 1, "prefetch_batches": 2,
    "seed": 3, "start_method": sys.argv[1]}})
pipeline = DataPipeline(config)
# Past the first window (2 batches, queued by the rank), batches come from work the feeder
# queued: each stage has then run, past its death signal, before the test stops it (with
# two producers, one might not have run yet).
for _ in range(6):
    next(pipeline)
{BLOCK}
"""


@pytest.mark.parametrize("start_method", ["forkserver", "fork"])
def test_a_killed_rank_leaves_no_pipeline_stage(start_method: str) -> None:
    """A producer, a collator and the feeder (and a forkserver, with its own children)."""
    parent = _start(PIPELINE, start_method)
    _poll(lambda: len(_descendants(parent.pid)) >= 3, "3 stages")
    _stop_stages(parent.pid)
    _assert_no_survivor(parent, at_least=3)


DILOCO = f"""
import sys
from runtime.diloco.local import _Process
learner = _Process([sys.executable, "-c", "import time; time.sleep(600)"], "learner-0", {{}},
                   print)
{BLOCK}
"""


def test_a_killed_diloco_launcher_leaves_no_learner() -> None:
    _assert_no_survivor(_start(DILOCO), at_least=1)


AGENT = f"""
import sys, threading
from pathlib import Path
from runtime.crash.agent import run_agent
from runtime.crash.layout import Layout
layout = Layout(Path(sys.argv[1])).make()
layout.prompt.write_text("diagnose")
agent = [sys.executable, "-c", "import time; time.sleep(600)"]
threading.Thread(target=run_agent, args=(agent, layout, {{}}, 600), daemon=True).start()
{BLOCK}
"""


def test_a_killed_diagnosis_runner_leaves_no_agent(tmp_path: Path) -> None:
    _assert_no_survivor(_start(AGENT, str(tmp_path)), at_least=1)
