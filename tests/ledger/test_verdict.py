"""The sample ledger's verdict (runtime.telemetry.ledger_verdict) over synthetic ledgers: a
schedule simulated as the loader walks it (runtime/data/schedule.py: global batches in
order, an epoch's short tail dropped) through world changes, restarts from checkpoints,
torchft groups dropping out and healing, tensor-parallel ranks sharing a slot and ranks
killed after their group committed; then planted faults, each found and named. Also the
load into a real embedded store, and `gkr ledger`."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runtime.telemetry.ledger_store import LedgerError, files_verdict, load_ledger, run_verdict
from runtime.telemetry.ledger_verdict import Entries, Verdict, judge
from runtime.telemetry.store import Store

T0 = time.time() - 86_400  # inside the table's TTL


@dataclass(frozen=True)
class Layout:
    """How a stretch of training reads the stream."""

    groups: tuple[int, ...]  # the replica groups taking part (-1: not fault-tolerant)
    slots_per_group: int
    tp: int  # ranks per slot
    bs: int
    micro: int

    @property
    def slots(self) -> int:
        return len(self.groups) * self.slots_per_group


@dataclass
class Run:
    """A simulated run: the stream position, the steps and the ledger rows written."""

    epoch_size: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    t: float = T0
    pos: int = 0  # the next global batch starts here (before the roll-over rule)
    step: int = 0
    after: dict[int, int] = field(default_factory=lambda: {0: 0})  # step -> pos after it
    started: dict[int, tuple[int, str, int, int]] = field(default_factory=dict)  # group ->
    # its incarnation: started, origin, resumed_from, and the process (a new one each)
    rolled_back: set[int] = field(default_factory=set)  # rows (by index) a restart undid
    processes: int = 0  # incarnations so far
    layout: Layout | None = None  # the last one trained with

    @property
    def superseded(self) -> int:
        return len(self.rolled_back)

    def take(self, size: int) -> int:
        epoch, offset = divmod(self.pos, self.epoch_size)
        if offset + size > self.epoch_size:  # a short tail is dropped
            epoch, offset = epoch + 1, 0
        self.pos = epoch * self.epoch_size + offset + size
        return epoch * self.epoch_size + offset

    def incarnate(self, group: int, origin: str, resumed_from: int, pid: int | None = None
                  ) -> None:
        """`pid`: the process, when it is not a new one (a group healing after it trained)."""
        self.t += 0.5
        self.processes += 1
        self.started[group] = (int(self.t * 1e9), origin, resumed_from,
                               pid or self.processes * 100)  # + its rank in the group

    def train(self, steps: int, layout: Layout) -> None:
        self.layout = layout
        for group in layout.groups:  # a group back in the quorum healed from a live peer
            if group not in self.started:
                self.incarnate(group, "heal" if self.step else "fresh", self.step)
        for _ in range(steps):
            self.step += 1
            self.t += 1
            batches = [self.take(layout.slots * layout.bs) for _ in range(layout.micro)]
            for slot in range(layout.slots):
                group = layout.groups[slot // layout.slots_per_group]
                for local in range(layout.tp):
                    self.rows.append(self.row(layout, batches, slot, group, local))
            self.after[self.step] = self.pos

    def row(self, layout: Layout, batches: list[int], slot: int, group: int,
            local: int) -> dict[str, Any]:
        started, origin, resumed_from, pid = self.started[group]
        rank = (max(group, 0) * layout.slots_per_group + slot % layout.slots_per_group) \
            * layout.tp + local
        return {"run_id": "run-1", "started": started, "origin": origin,
                "resumed_from": resumed_from, "step": self.step, "group": group, "rank": rank,
                "pid": pid + rank, "at": self.t + rank / 1e4, "slot": slot,
                "slots": layout.slots, "epoch_size": self.epoch_size,
                "starts": [b + slot * layout.bs for b in batches], "count": layout.bs,
                "batch_starts": batches, "batch_count": layout.slots * layout.bs}

    def leave(self, groups: set[int]) -> None:
        """Groups drop out of the quorum (they heal when they come back)."""
        for group in groups:
            self.started.pop(group, None)

    def lose(self, group: int) -> None:
        """Only `group` committed the last step (the others' votes said no), then died before a
        peer took its state: the step is redone without it, and its rows are rolled back."""
        step = self.step
        self.rows = [r for r in self.rows if r["step"] != step or r["group"] == group
                     or r["at"] < self.t]  # the others wrote nothing for it
        self.rolled_back |= {i for i, r in enumerate(self.rows) if r["step"] == step
                             and r["at"] >= self.t}
        self.started.pop(group)
        self.step, self.pos = step - 1, self.after[step - 1]

    def restart(self, checkpoint: int, groups: tuple[int, ...], origin: str = "checkpoint"
                ) -> None:
        """Every rank restarts from the checkpoint of step `checkpoint` (0: from scratch)."""
        self.rolled_back |= {i for i, r in enumerate(self.rows) if r["step"] > checkpoint}
        self.started.clear()
        for group in groups:
            self.incarnate(group, origin if checkpoint else "fresh", checkpoint)
        self.step, self.pos = checkpoint, self.after[checkpoint]


@st.composite
def runs(draw: st.DrawFn) -> Run:
    """A run through random world changes, restarts and heals, always exactly once."""
    torchft = draw(st.booleans())
    all_groups = tuple(range(draw(st.integers(1, 3)))) if torchft else (-1,)
    layouts = st.builds(
        Layout, st.sets(st.sampled_from(all_groups), min_size=1).map(lambda g: tuple(sorted(g))),
        st.integers(1, 2), st.integers(1, 2), st.integers(1, 4), st.integers(1, 2))
    widest = len(all_groups) * 2 * 4
    run = Run(epoch_size=draw(st.integers(widest, widest * 4)))
    for _ in range(draw(st.integers(1, 6))):
        layout = draw(layouts)
        if run.step and draw(st.booleans()):
            run.restart(draw(st.integers(0, run.step)), layout.groups)
        else:
            run.leave(set(run.started) - set(layout.groups))
        run.train(draw(st.integers(1, 8)), layout)
    return run


def verdict(rows: list[dict[str, Any]], truncated: tuple[str, ...] = ()) -> Verdict:
    return judge(Entries.from_rows(rows), truncated)


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(runs())
def test_a_clean_schedule_through_world_changes_and_restarts_is_exactly_once(run: Run) -> None:
    found = verdict(run.rows)
    assert found.exactly_once, found.explain()
    assert found.reached_step == run.step
    assert found.end == run.after[run.step]
    assert found.superseded_rows == run.superseded
    assert found.samples == found.end - sum(b - a for a, b in found.dropped_tail)
    assert all(b - a < run.epoch_size and b % run.epoch_size == 0 for a, b in found.dropped_tail)


def _last_step_rows(run: Run) -> list[dict[str, Any]]:
    """The rows of the last step (not those of an earlier incarnation at that step)."""
    return [r for r in run.rows if r["step"] == run.step and r["at"] >= run.t]


@FAST
@given(runs(), st.data())
def test_a_rank_killed_after_its_group_committed_is_unrecorded_not_missing(
        run: Run, data: st.DataObject) -> None:
    last = _last_step_rows(run)
    slots = sorted({r["slot"] for r in last})
    if len(slots) < 2:
        return
    gone = data.draw(st.sampled_from(slots))
    rows = [r for r in run.rows if r not in last or r["slot"] != gone]
    found = verdict(rows)
    assert found.exactly_once, found.explain()
    assert [(u.step, u.slot) for u in found.unrecorded] == [(run.step, gone)]


@FAST
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 6))
def test_a_commit_lost_with_its_group_is_superseded_not_trained_twice(
        before: int, bs: int, after: int) -> None:
    """Group 1 alone committed a step, then died: group 0 trains it again on its own. The lost
    commit is not in the model, so its samples are trained once (without the rule: a step
    where ranks disagree, and samples trained twice)."""
    run = Run(epoch_size=400)
    run.train(before, Layout((0, 1), 1, 1, bs, 1))
    run.lose(1)
    run.train(after, Layout((0,), 1, 1, bs, 1))
    found = verdict(run.rows)
    assert found.exactly_once, found.explain()
    assert found.superseded_rows == run.superseded == 1
    assert found.reached_step == before - 1 + after


def test_a_restarted_group_that_trained_alone_then_healed_is_rolled_back() -> None:
    """A split brain (seen under load in tests/runtime_ft/test_ft_chaos.py): group 1 dies,
    Ray Train restarts it fresh while group 0 trains on, and under load (group 0's
    heartbeats late) it forms a quorum of its own and commits two steps of its own lineage
    before group 0 is back; then it heals from group 0. Group 0's lineage is the model's:
    exactly once, group 1's lone steps superseded, and its restart rolls back nothing."""
    two, one = Layout((0, 1), 1, 1, 2, 1), Layout((0,), 1, 1, 2, 1)
    run = Run(epoch_size=10**6)
    run.train(5, two)
    run.leave({1})
    run.train(2, one)
    restarted = run.t + 0.1  # group 1's new process starts training, group 0 trains on
    run.train(3, one)
    alone = [{**run.rows[0], "started": int(restarted * 1e9), "origin": "fresh",
              "resumed_from": 0, "step": step, "group": 1, "rank": 1, "pid": 4242,
              "at": restarted + 0.2 * step, "slot": 0, "slots": 1, "starts": [2 * (step - 1)],
              "count": 2, "batch_starts": [2 * (step - 1)], "batch_count": 2}
             for step in (1, 2)]
    run.incarnate(1, "heal", run.step, pid=4242 - 1)  # the same process (pid: +rank)
    run.train(4, two)
    found = verdict(run.rows + alone)
    assert found.exactly_once, found.explain()
    assert found.reached_step == run.step and found.superseded_rows == len(alone)
    # Without the later heal it is a real restart: what group 0 trained before it is undone.
    fresh_start = verdict([r for r in run.rows if r["pid"] != 4242] + alone)
    assert fresh_start.superseded_rows > len(alone)



@FAST
@given(runs(), st.data())
def test_a_trainer_that_took_fewer_samples_leaves_a_gap_named_by_step_and_ranks(
        run: Run, data: st.DataObject) -> None:
    row = data.draw(st.sampled_from(_last_step_rows(run)))
    if row["count"] < 2:
        return
    same = [r for r in _last_step_rows(run) if r["slot"] == row["slot"]]  # its TP ranks
    for r in same:
        r["count"] -= 1
    found = verdict(run.rows)
    assert not found.exactly_once
    gap = row["starts"][-1] + row["count"]
    assert [(m.start, m.stop) for m in found.missing][-1] == (gap, gap + 1)
    assert run.step in found.missing[-1].steps
    assert {r["rank"] for r in same} <= set(found.missing[-1].ranks)
    assert row["group"] in found.missing[-1].groups or row["group"] == -1


@FAST
@given(runs(), st.data())
def test_a_trainer_reading_another_slots_span_is_a_duplicate_and_a_gap(
        run: Run, data: st.DataObject) -> None:
    rows = _last_step_rows(run)
    slots = sorted({r["slot"] for r in rows})
    if len(slots) < 2:
        return
    mine, theirs = data.draw(st.permutations(slots))[:2]
    other = next(r for r in rows if r["slot"] == theirs)
    wrong = [r for r in rows if r["slot"] == mine]
    for r in wrong:
        r["starts"] = list(other["starts"])
    found = verdict(run.rows)
    assert not found.exactly_once
    twice = {i for d in found.duplicated for i in range(d.start, d.stop)}
    assert {i for s in other["starts"] for i in range(s, s + other["count"])} <= twice
    ranks = {r for d in found.duplicated for r in d.ranks}
    assert {r["rank"] for r in wrong} | {other["rank"]} <= ranks
    assert all(run.step in d.steps for d in found.duplicated)
    assert sum(m.stop - m.start for m in found.missing) == len(wrong[0]["starts"]) * \
        wrong[0]["count"]


@FAST
@given(runs(), st.data())
def test_a_rank_disagreeing_on_the_steps_place_in_the_stream_is_named(
        run: Run, data: st.DataObject) -> None:
    rows = _last_step_rows(run)
    if len(rows) < 3:
        return
    row = data.draw(st.sampled_from(rows))
    row["batch_starts"] = [b + 1 for b in row["batch_starts"]]
    found = verdict(run.rows)
    assert not found.exactly_once
    assert [(d.step, d.ranks) for d in found.disagreements] == [(run.step, (row["rank"],))]
    assert "ranks disagree on step" in found.explain()


@FAST
@given(runs())
def test_a_restart_that_does_not_roll_back_trains_its_replayed_steps_twice(run: Run) -> None:
    """A restart from a checkpoint mislabelled as a heal: the steps it replays are kept twice."""
    if run.step < 2 or run.layout is None:
        return
    replayed = _last_step_rows(run)
    run.restart(run.step - 1, run.layout.groups, origin="heal")
    run.train(1, run.layout)
    found = verdict(run.rows)
    assert not found.exactly_once and not found.missing
    twice = {i for d in found.duplicated for i in range(d.start, d.stop)}
    assert twice == {i for r in replayed for s in r["starts"] for i in range(s, s + r["count"])}
    assert all(d.steps == (run.step,) for d in found.duplicated)


@FAST
@given(runs(), st.data())
def test_the_sweep_finds_what_counting_every_index_finds(run: Run, data: st.DataObject) -> None:
    """Random damage to spans: the verdict's missing and duplicated indices are those a count
    of every index (over the trainers of the kept rows) finds."""
    if run.superseded:  # the lineage rule has its own tests; here every row is kept
        return
    for row in data.draw(st.lists(st.sampled_from(run.rows), max_size=3)):
        row["starts"] = [s + data.draw(st.integers(-3, 3)) for s in row["starts"]]
    found = verdict(run.rows)
    trainers = {(r["step"], r["group"], r["slot"], s, r["count"]) for r in run.rows
                for s in r["starts"]}
    counts = Counter(i for *_, start, count in trainers for i in range(start, start + count))
    tails = {i for a, b in found.dropped_tail for i in range(a, b)}
    assert {i for i in range(found.end) if not counts[i]} - tails == \
        {i for m in found.missing for i in range(m.start, m.stop)}
    assert {i for i, n in counts.items() if n > 1} == \
        {i for d in found.duplicated for i in range(d.start, d.stop)}


def test_a_million_rows_are_judged_in_numpy_not_per_sample() -> None:
    """1000 steps of 1000 ranks (10^6 rows): the verdict without a set of the 4*10^6
    indices (the measured time is printed; no timing assert, the machine may be loaded)."""
    import numpy as np

    steps, ranks, bs = 1000, 1000, 4
    step, rank = (a.ravel() for a in np.meshgrid(np.arange(1, steps + 1), np.arange(ranks),
                                                 indexing="ij"))
    batch = (step - 1) * ranks * bs
    entries = Entries.from_columns({
        "row": np.arange(steps * ranks), "run": np.zeros_like(step), "step": step,
        "group": np.full_like(step, -1),
        "rank": rank, "pid": rank, "slot": rank, "slots": np.full_like(step, ranks),
        "start": batch + rank * bs, "count": np.full_like(step, bs), "batch_start": batch,
        "batch_count": np.full_like(step, ranks * bs), "epoch_size": np.full_like(step, 10**9),
        "started": np.full_like(step, int(T0 * 1e9)), "resumed_from": np.zeros_like(step),
        "origin": np.zeros_like(step), "at": T0 + step.astype(float)})
    begun = time.perf_counter()
    found = judge(entries)
    print(f"judged {len(entries)} entries in {time.perf_counter() - begun:.2f} s",
          file=sys.stderr)
    assert found.exactly_once and found.samples == 4 * 10**6


# --- the store and `gkr ledger` -------------------------------------------------------------

def write_files(folder: Path, run: Run, partial: bool = False) -> Path:
    """The run's ledger as the writer leaves it: a file per rank incarnation."""
    files: dict[tuple[int, int, int], list[str]] = {}
    for row in run.rows:
        files.setdefault((row["started"], row["group"], row["rank"]), []).append(
            json.dumps(row))
    run_folder = folder / "run-1"
    run_folder.mkdir(parents=True, exist_ok=True)
    for (started, group, rank), lines in files.items():
        (run_folder / f"{started}-g{group}-r{rank}-{1000 + rank}.jsonl").write_text(
            "\n".join(lines) + "\n")
    if partial:  # a rank killed in the middle of its write
        victim = sorted(run_folder.iterdir())[-1]
        victim.write_text(victim.read_text() + lines[-1][: len(lines[-1]) // 2])
    return run_folder


def _run() -> Run:
    run = Run(epoch_size=50)
    run.train(6, Layout((0, 1), 2, 2, 3, 2))
    run.restart(3, (0, 1))
    run.train(5, Layout((0, 1), 1, 2, 4, 1))
    return run


def test_loading_is_idempotent_and_a_partial_last_line_is_skipped_and_named(
        tmp_path: Path) -> None:
    run = _run()
    write_files(tmp_path / "ledger", run, partial=True)
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        assert load_ledger(store, tmp_path / "ledger", "run-1") == len(run.rows)
        assert load_ledger(store, tmp_path / "ledger", "run-1") == 0
        found = run_verdict(store, ["run-1"])
    assert found.exactly_once, found.explain()
    assert found.rows == len(run.rows) and found.superseded_rows == run.superseded
    assert len(found.truncated) == 1 and "partial last line" in found.explain()
    assert found == verdict(run.rows, found.truncated)
    assert files_verdict(tmp_path / "ledger", "run-1") == found  # the same, without a store


def test_a_grown_file_loads_only_its_new_lines(tmp_path: Path) -> None:
    run = _run()
    folder = write_files(tmp_path / "ledger", run)
    victim = sorted(folder.iterdir())[0]
    lines = victim.read_text().splitlines(keepends=True)
    victim.write_text("".join(lines[:-2]))
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        assert load_ledger(store, tmp_path / "ledger", "run-1") == len(run.rows) - 2
        victim.write_text("".join(lines))
        assert load_ledger(store, tmp_path / "ledger", "run-1") == 2
        assert run_verdict(store, ["run-1"]).rows == len(run.rows)


def test_a_bad_line_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    folder = write_files(tmp_path / "ledger", _run())
    victim = sorted(folder.iterdir())[1]  # after a file's rows: the insert's rows map back
    lines = victim.read_text().splitlines()
    lines[2] = lines[2].replace('"step": ', '"step": "three", "x": ')
    victim.write_text("\n".join(lines) + "\n")
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store, \
            pytest.raises(LedgerError, match=rf"{victim.name}: line 3: .*step"):
        load_ledger(store, tmp_path / "ledger", "run-1")
    with pytest.raises(LedgerError, match=rf"{victim.name}: line 3: "):
        files_verdict(tmp_path / "ledger", "run-1")


def gkr(*args: str) -> tuple[int, str, str]:
    """`gkr ARGS` through its entry point (typed errors become messages and exit codes)."""
    from generator.cli import main

    runner = CliRunner()
    with runner.isolation() as (out, err, _):
        saved, sys.argv = sys.argv, ["gkr", *args]
        try:
            main()
            code = 0
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 1
        finally:
            sys.argv = saved
            sys.stdout.flush()
            sys.stderr.flush()
        return code, out.getvalue().decode(), err.getvalue().decode()


def test_gkr_ledger_says_exactly_once_names_the_damage_and_exits_by_it(
        tmp_path: Path) -> None:
    run = _run()
    ledger, dsn = tmp_path / "ledger", f"chdb://{tmp_path / 'store'}"
    folder = write_files(ledger, run)
    code, out, _ = gkr("ledger", "run-1", "--folder", str(ledger), "--dsn", dsn)
    assert code == 0 and "exactly once" in out and "superseded" in out
    code, out, _ = gkr("ledger", "run-1", "--folder", str(ledger), "--dsn", dsn, "--json")
    assert code == 0 and json.loads(out)["exactly_once"] is True

    damaged = max(run.rows, key=lambda r: r["at"])
    victim = folder / f"{damaged['started']}-g{damaged['group']}-r{damaged['rank']}-" \
                      f"{1000 + damaged['rank']}.jsonl"
    (tmp_path / "store").rename(tmp_path / "old-store")  # a fresh store for the damaged files
    lines = victim.read_text().splitlines()
    wrong = json.loads(lines[-1]) | {"count": damaged["count"] - 1}
    for other in folder.iterdir():  # the rank's TP peer too: the whole trainer took fewer
        peer = [json.loads(line) for line in other.read_text().splitlines()]
        if peer[-1]["step"] == damaged["step"] and peer[-1]["slot"] == damaged["slot"]:
            peer[-1]["count"] -= 1
            other.write_text("".join(json.dumps(p) + "\n" for p in peer))
    code, out, _ = gkr("ledger", "run-1", "--folder", str(ledger), "--dsn", dsn)
    gap = wrong["starts"][-1] + wrong["count"]
    assert code == 1, out
    assert "NOT exactly once" in out and f"[{gap}, {gap + 1})" in out
    assert f"step {damaged['step']}" in out and str(damaged["rank"]) in out

    code, _, err = gkr("ledger", "run-2", "--folder", str(ledger), "--dsn", dsn)
    assert code == 2 and "no sample ledger" in err and "--folder" in err


def test_gkr_ledger_judges_learners_runs_as_one_stream(tmp_path: Path) -> None:
    """DiLoCo learners are runs of their own, each reading its slot of one stream into a
    store of its own (runtime.diloco.local): judged alone, a learner's verdict finds the other
    learner's slots unrecorded; judged together, the stream is covered once."""
    run = Run(epoch_size=50)
    run.train(6, Layout((0, 1), 1, 1, 4, 1))
    folders = []
    for learner in (0, 1):
        name, folder = f"learner-{learner}", tmp_path / f"learner-{learner}" / "ledger"
        (folder / name).mkdir(parents=True)
        # learner-0 starts (fresh) 1.6 s later, after learner-1 committed its step 1: a start
        # of its own run, which rolls back nothing of learner-1's (the lineage rule is per run)
        late = 1.6 * (learner == 0)
        rows = [row | {"run_id": name, "started": row["started"] + int(late * 1e9),
                       "at": row["at"] + late} for row in run.rows if row["group"] == learner]
        (folder / name / f"{rows[0]['started']}-g{learner}-r0-1000.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in rows))
        folders += ["--folder", str(folder)]
    code, out, _ = gkr("ledger", "learner-0", "learner-1", *folders,
                       "--dsn", f"chdb://{tmp_path / 'both'}")
    assert code == 0 and out.startswith("runs learner-0, learner-1: exactly once"), out
    assert "unrecorded" not in out and "48 samples" in out and "0 superseded" in out
    code, out, _ = gkr("ledger", "learner-0", *folders[:2], "--dsn", f"chdb://{tmp_path / 'one'}")
    assert code == 0 and "unrecorded" in out, out


def test_a_line_as_fluent_bit_posts_it_lands_with_the_pods_identity(tmp_path: Path) -> None:
    """The cluster path (generator/platform/telemetry.py): the ledger line plus the keys
    Fluent Bit adds (the path's namespace, job and run; cluster, node, team), posted as
    JSONEachRow with unknown keys skipped, is a row carrying the pod's identity."""
    run = _run()
    shipped = run.rows[0] | {"namespace": "team-llm", "job": "llm-7b", "run": "run-1",
                             "cluster": "usc1-prod", "node": "gpu-node-3", "team": "llm",
                             "extra": "a key the table lacks"}
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        store.command("SET input_format_skip_unknown_fields = 1")
        store.insert_raw("sample_ledger_raw", "JSONEachRow", json.dumps(shipped).encode())
        (row,) = store.query("SELECT cluster, namespace, team, job, run, node, replica_group, "
                             "rank, role, step FROM sample_ledger").dicts()
    assert row == {"cluster": "usc1-prod", "namespace": "team-llm", "team": "llm",
                   "job": "llm-7b", "run": "run-1", "node": "gpu-node-3",
                   "replica_group": shipped["group"], "rank": shipped["rank"],
                   "role": "worker", "step": shipped["step"]}
