"""The sample ledger written by real runs (runtime.telemetry.ledger, wired in the training
loop) and judged by its verdict: every sample trained exactly once through a plain 2-rank run,
and auxiliary producers; and a planted duplicate caught. The other failure paths' verdicts ride
on the runs that test them: a Ray Train restart from a checkpoint and a resume on another
layout and producer count in tests/runtime_ft/test_ft_restart.py, torchft kills in
tests/runtime_ft/test_ft_chaos.py, DiLoCo learners in tests/diloco/test_local_run.py.
The runs are testing.ft's: small MLPs on gloo, a feature stream in order, kills from the
loader's producers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from runtime.data.schedule import Span
from runtime.ft.origin import Origin
from runtime.ft.replica import Replica
from runtime.run.config import TrainConfig
from runtime.telemetry.ledger import LEDGER_DIR, LedgerWriter, ledger_folder, on_this_node
from runtime.telemetry.ledger_verdict import Entries, Verdict, judge
from runtime.train.driver import run_training
from runtime.train.loop import LoopContext, RankLedger
from testing.ft import exactly_once, ledger, with_telemetry

ROOT = Path(__file__).resolve().parents[2]
BATCH = 4


def _span(slot: int, start: int, slots: int = 2) -> Span:
    return Span(slot, slots, start + slot * BATCH, BATCH, start, slots * BATCH, 100)


def test_a_line_per_step_in_the_stores_columns_and_nothing_for_an_empty_step(
        tmp_path: Path) -> None:
    with LedgerWriter(tmp_path, "run-a", 1, 3, "checkpoint", 6, started=12) as writer:
        writer.record(7, [_span(1, 48), _span(1, 56)])  # two micro-batches
        writer.record(8, [])
    (path,) = (tmp_path / "run-a").iterdir()
    assert path.name == f"12-g1-r3-{os.getpid()}.jsonl"
    (row,) = ledger(tmp_path)
    assert {k: v for k, v in row.items() if k != "at"} == {
        "run_id": "run-a", "started": 12, "origin": "checkpoint", "resumed_from": 6,
        "group": 1, "rank": 3, "pid": os.getpid(), "step": 7, "slot": 1, "slots": 2,
        "epoch_size": 100, "starts": [52, 60], "count": 4, "batch_starts": [48, 56],
        "batch_count": 8}


def test_a_line_written_survives_a_sigkill_of_its_writer(tmp_path: Path) -> None:
    code = ("import os, signal, sys; from pathlib import Path; "
            "from runtime.data.schedule import Span; "
            "from runtime.telemetry.ledger import LedgerWriter; "
            "w = LedgerWriter(Path(sys.argv[1]), 'r', -1, 0, 'fresh', 0); "
            "w.record(1, [Span(0, 1, 0, 4, 0, 4, 100)]); os.kill(os.getpid(), signal.SIGKILL)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, check=False)
    assert done.returncode == -signal.SIGKILL
    assert [row["step"] for row in ledger(tmp_path)] == [1]


def test_a_group_that_heals_after_it_trained_starts_a_new_file(tmp_path: Path) -> None:
    """A replica group that trained and then healed from a live peer took the peer's
    lineage: its steps from there go in a file of their own (origin heal), which the verdict
    needs to tell a split brain's lone steps from the model's (tests/ledger/test_verdict.py)."""
    replica = SimpleNamespace(index=1, origin=lambda: Origin("fresh", 0))
    context = SimpleNamespace(ledger=tmp_path, run_id="run-a", replica=replica)
    ranks = RankLedger(cast(LoopContext, context), cast(Replica, replica), 0)
    ranks.record(1, [_span(0, 0)])
    ranks.record(2, [_span(0, 8)])
    replica.origin = lambda: Origin("heal", 9)  # healed from a peer at step 9
    ranks.record(10, [_span(0, 72)])
    ranks.close()
    files = sorted((tmp_path / "run-a").iterdir())
    assert len(files) == 2
    first, second = (ledger_lines(path) for path in files)
    assert [(r["origin"], r["resumed_from"], r["step"]) for r in first + second] == [
        ("fresh", 0, 1), ("fresh", 0, 2), ("heal", 9, 10)]
    assert second[0]["started"] > first[0]["started"]


def ledger_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_folder_is_the_pods_else_beside_a_local_store(tmp_path: Path) -> None:
    assert ledger_folder("chdb:///x/telemetry", {}) == Path("/x/telemetry/ledger")
    assert ledger_folder("http://h:8123/t", {}, cwd=tmp_path) == tmp_path / ".gkr/ledger"
    assert ledger_folder("chdb:///x", {LEDGER_DIR: "/gkr/telemetry/ledger"}) == \
        Path("/gkr/telemetry/ledger")
    assert on_this_node(tmp_path, {LEDGER_DIR: "/node"}) == Path("/node")
    assert on_this_node(tmp_path, {}) == tmp_path


# -- real runs -------------------------------------------------------------------------------


def _run(tmp_path: Path, name: str, **sections: Any) -> TrainConfig:
    """A 6-step run with telemetry (and so the ledger) in tmp_path/telemetry."""
    return with_telemetry(tmp_path, name, BATCH, run={"steps": 6}, **sections)


def _verdict(rows: list[dict[str, Any]]) -> Verdict:
    return judge(Entries.from_rows(rows))


def _exactly_once(tmp_path: Path, steps: int, samples: int) -> list[dict[str, Any]]:
    return exactly_once(tmp_path / "telemetry" / "ledger", steps, samples)[1]


def _planted_duplicate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows where one rank's step 3 claims to have trained its step-2 samples again."""
    step2 = next(r for r in rows if r["step"] == 2 and r["slot"] == 1)
    return [{**r, "starts": step2["starts"]} if r["step"] == 3 and r["slot"] == 1 else r
            for r in rows]


@pytest.mark.slow
def test_a_plain_two_rank_run_trains_each_sample_once(local_ray: None, tmp_path: Path) -> None:
    lines: list[str] = []
    run_training(_run(tmp_path, "plain", layout={"max_world_size": 2}), echo=lines.append)
    rows = _exactly_once(tmp_path, 6, 6 * 2 * BATCH)
    assert sorted((r["step"], r["rank"]) for r in rows) == [(s, k) for s in range(1, 7)
                                                            for k in (0, 1)]
    assert {(r["group"], r["origin"]) for r in rows} == {(-1, "fresh")}
    assert [line for line in lines if line.startswith("sample ledger: ")] == [
        f"sample ledger: exactly once: 48 samples [0, 48) up to step 6 (see `gkr ledger "
        f"{rows[0]['run_id']}`)"]
    planted = _verdict(_planted_duplicate(rows))
    assert not planted.exactly_once
    assert [(d.start, d.stop, d.steps) for d in planted.duplicated] == [(12, 16, (2, 3))]


@pytest.mark.slow
def test_auxiliary_producers_train_each_sample_once(local_ray: None, tmp_path: Path) -> None:
    run = _run(tmp_path, "served", served=True, layout={"max_world_size": 2})
    run_training(run, echo=lambda line: None)
    _exactly_once(tmp_path, 6, 6 * 2 * BATCH)
