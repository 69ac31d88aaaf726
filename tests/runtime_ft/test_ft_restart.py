"""Default recovery (seed §7.1), end to end with Ray Train, gloo ranks, real loader pipelines
and DCP: a worker group that Ray Train restarts after a SIGKILL resumes from the newest
checkpoint its run committed, and an explicit resume checkpoint loads into another layout and
producer count. Both runs keep the sample ledger, whose verdict must be exactly once with the
rolled-back steps superseded (issue 24: the ledger rides on these runs instead of repeating
them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

from runtime.train.driver import run_training
from testing.ft import exactly_once, kills, with_telemetry

pytestmark = pytest.mark.slow
BATCH, WORLD = 4, 2


def _loader_state(step_dir: Path) -> dict[str, int]:
    state = {"train": {"loader": {"epoch": -1, "offset": -1}}}
    dcp.load(state, checkpoint_id=str(step_dir))
    return state["train"]["loader"]


def test_a_restarted_worker_group_resumes_from_the_newest_committed_checkpoint(
    local_ray: None, tmp_path: Path
) -> None:
    # Rank 0 reads sample 64 first in step 9 (8 steps x 2 ranks x 4 samples before it). With
    # one batch in flight its producer reaches it only once step 8 has its batch, so step 6's
    # blocking checkpoint is committed and step 9's cannot be.
    uri = tmp_path / "ckpt"
    run = with_telemetry(tmp_path, "restart", BATCH, kill_at=(64,),
               run={"steps": 12, "max_failures": 1},
               layout={"max_world_size": WORLD},
               checkpoint={"uri": str(uri), "interval_steps": 3, "keep_last": 2,
                           "async_save": False})
    lines: list[str] = []
    result = run_training(run, echo=lines.append)
    assert len(kills(tmp_path / "data")) == 1  # a rank really died
    assert result.resumed is None  # the driver started fresh ...
    restarted = [line for line in lines if "worker group restarted" in line]
    assert restarted == [f"worker group restarted after a failure: resuming from "
                         f"{uri}/step-0000000006 (step 6), the newest checkpoint this run "
                         "committed"]
    assert sorted(result.losses) == list(range(1, 13))
    assert result.checkpoints == (9, 12)
    assert _loader_state(uri / "step-0000000012") == {"epoch": 0, "offset": 12 * WORLD * BATCH}
    # The ledger: each rank's restarted incarnation resumed from step 6, and the steps the
    # dead group had trained past it are superseded, not counted twice.
    verdict, rows = exactly_once(tmp_path / "ledger", 12, 12 * WORLD * BATCH)
    restarted_ranks = {(r["rank"], r["started"]) for r in rows if r["origin"] == "checkpoint"}
    assert len(restarted_ranks) == WORLD and {r["resumed_from"] for r in rows} == {0, 6}
    assert verdict.superseded_rows == len([r for r in rows if r["origin"] == "fresh"
                                           and r["step"] > 6]) > 0


def test_an_explicit_resume_checkpoint_loads_into_another_layout_and_producer_count(
    local_ray: None, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    two = with_telemetry(tmp_path, "two", BATCH, run={"steps": 8}, layout={"max_world_size": 2},
               checkpoint={"uri": str(first), "interval_steps": 3})
    assert run_training(two, echo=lambda line: None).checkpoints[:2] == (3, 6)

    second = tmp_path / "second"
    one = with_telemetry(tmp_path, "one", BATCH, run={"steps": 10}, layout={"max_world_size": 1},
               data={"producers": 3, "collators": 2},
               checkpoint={"uri": str(second), "interval_steps": 3,
                           "resume_from": str(first / "step-0000000006")})
    result = run_training(one, echo=lambda line: None)
    assert result.plan.world_size == 1
    assert result.resumed is not None and result.resumed.step == 6
    assert sorted(result.losses) == [7, 8, 9, 10]
    # The stream goes on where 2 ranks left it, now one batch of one rank per step.
    assert _loader_state(second / "step-0000000009") == {"epoch": 0,
                                                         "offset": 6 * 2 * BATCH + 3 * BATCH}
    # Both runs' ledger rows: the first's steps 7 and 8 (2 ranks) were rolled back.
    verdict, rows = exactly_once(tmp_path / "ledger", 10, 6 * 2 * BATCH + 4 * BATCH)
    assert verdict.superseded_rows == 4
    assert {r["slots"] for r in rows if r["origin"] == "checkpoint"} == {1}
