"""torchft replica groups end to end (seed §7.2): real Ray Train worker groups, a real
Lighthouse in the driver, gloo, each rank's loader pipeline, and a SIGKILL from outside.

The runs are paced (the dataset sleeps per sample while a `pace` file exists), so that the
survivors are still training when a replacement arrives however loaded the machine is; the
test lifts the pace once it has seen what it waits for.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from runtime.ft.host import RunStopped
from runtime.run.config import TrainConfig
from runtime.train.driver import TrainResult, run_training
from testing.ft import config, ledger, verdict

pytestmark = pytest.mark.slow
BATCH, GROUP = 4, 2


class Run:
    """A training run on a thread of the test, with its printed lines."""

    def __init__(self, run: TrainConfig) -> None:
        self.lines: list[str] = []
        self.result: TrainResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._train, args=(run,), daemon=True)
        self.thread.start()

    def _train(self, run: TrainConfig) -> None:
        try:
            self.result = run_training(run, echo=self.lines.append)
        except BaseException as error:  # the test asserts on it
            self.error = error

    def wait(self, timeout: float = 600) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the run did not end"


def wait_for(run: Run, what: str, found: Callable[[], Any], timeout: float = 400) -> Any:
    """Poll until `found` gives something; fail naming what never came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = found()
        if value:
            return value
        if not run.thread.is_alive():
            pytest.fail(f"the run ended ({run.error!r}) before: {what}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for: {what}")


def _ft_run(folder: Path, groups: int, group_size: int, **ft: Any) -> TrainConfig:
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "pace").touch()
    return config(folder / "data", pace_s=0.05, batch=BATCH,
                  run={"steps": 600, "log_every": 10, "max_failures": ft.pop("max_failures")},
                  layout={"max_world_size": groups * group_size},
                  fault_tolerance={"enabled": True, "replica_groups": groups,
                                   "heartbeat_timeout_s": 1.0, "watchdog_timeout_s": 3.0,
                                   "join_timeout_s": 10.0,
                                   "timeout_s": 10.0,
                                   **ft})


def _committed(folder: Path, group: int, rank: int, size: int = GROUP) -> list[dict[str, Any]]:
    """The ledger rows of rank `rank` of group `group` of `size` ranks (the ledger names
    global ranks)."""
    return [line for line in ledger(folder / "ledger")
            if (line["group"], line["rank"]) == (group, group * size + rank)]


def test_survivors_train_on_without_restart_and_a_replacement_heals_from_a_peer(
    local_ray: None, tmp_path: Path
) -> None:
    run = Run(_ft_run(tmp_path, groups=3, group_size=GROUP, min_replica_groups=2,
                      max_failures=1))
    # Once all three groups train (a slow starter joins late and heals), kill a shard of
    # group 1 (rank 1): the watchdog tears its whole group down.
    victim = wait_for(run, "every group committing", lambda: all(
        len(_committed(tmp_path, g, 0)) >= 3 for g in range(3)) and _committed(tmp_path, 1, 1)[-1])
    os.kill(victim["pid"], signal.SIGKILL)
    killed_at = victim["step"]
    first = _committed(tmp_path, 1, 0)[0]["pid"]
    back = wait_for(run, "a replacement of group 1 committing", lambda: [
        line for line in _committed(tmp_path, 1, 0) if line["pid"] != first])
    (tmp_path / "data" / "pace").unlink()  # seen what we waited for: finish quickly
    run.wait()
    assert run.error is None, run.error
    result = run.result
    assert result is not None
    lines = ledger(tmp_path / "ledger")

    # The survivors never restarted and committed every step to the last, in order, also
    # the steps that only they trained while group 1 was away.
    world = {line["step"]: line["slots"] for line in lines}
    for group in (0, 2):
        for rank in range(GROUP):
            mine = [line["step"] for line in _committed(tmp_path, group, rank)]
            assert len({line["pid"] for line in _committed(tmp_path, group, rank)}) == 1
            assert mine == list(range(mine[0], 601))
            assert mine[0] < killed_at
    assert [s for s in range(killed_at + 1, back[0]["step"]) if world[s] == 2 * GROUP]
    # The replacement (both its ranks are new processes) healed from a peer: its first step
    # follows the step its peers were at; there is no checkpoint to load from.
    assert back[0]["step"] > killed_at + 1
    assert {line["origin"] for line in back} == {"heal"}
    assert len({line["pid"] for line in _committed(tmp_path, 1, 1)}) == 2
    assert any(f"replica group 1 healed from a live peer at step {back[0]['step'] - 1}" in line
               for line in run.lines)

    # No sample was trained twice or lost: the ledger's verdict, over a stream that 3 and
    # then 2 (and again 3) groups read.
    judged = verdict(tmp_path / "ledger")
    assert judged.exactly_once, judged.explain()
    assert judged.reached_step == 600
    assert set(world.values()) == {2 * GROUP, 3 * GROUP}

    # The loss keeps falling through the failure: each 200 steps' mean is below the last.
    losses = result.losses
    windows = [mean(loss for step, loss in losses.items() if start < step <= start + 200)
               for start in (0, 200, 400)]
    assert windows == sorted(windows, reverse=True), losses

    # One drop, one shrink request (local: recorded by the run, no Warden).
    assert [r.request_id.rsplit("-q", 1)[0] for r in result.shrinks] == [f"{result.run_id}-g1"]
    assert sum("replica group 1 dropped" in line for line in run.lines) == 1


def test_below_the_minimum_of_replica_groups_the_run_stops_with_a_clear_error(
    local_ray: None, tmp_path: Path
) -> None:
    run = Run(_ft_run(tmp_path, groups=2, group_size=1, min_replica_groups=2,
                      quorum_timeout_s=5.0, max_failures=0))
    victim = wait_for(run, "group 1 committing steps",
                      lambda: (c := _committed(tmp_path, 1, 0, size=1)) and len(c) >= 3 and c[-1])
    os.kill(victim["pid"], signal.SIGKILL)
    run.wait()
    assert isinstance(run.error, RunStopped), run.error
    message = str(run.error)
    assert "stopped: replica group 0: no quorum of fault_tolerance.min_replica_groups=2" in message
    assert "within 5s" in message
    assert "replica group 1 gave up after run.max_failures=0 restart(s)" in message
    assert "Traceback" not in message
