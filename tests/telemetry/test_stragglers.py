"""The straggler method (seed §8.3) on synthetic samples with known stragglers: 16 ranks, three
groups (two communicators, two message sizes of one), arrival noise, twelve windows; a
persistent straggler, an intermittent one that is later still in three windows, and a group
seen from one rank only."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.telemetry import stragglers
from runtime.telemetry.store import Store, migrations, sql_file
from runtime.telemetry.stragglers import NoSamples, analyze
from testing.synthetic import DEFAULT_GROUPS, Group, Run, Straggler, samples
from tests.telemetry.test_store import migrate_until

PERSISTENT, INTERMITTENT, SLOW_WINDOWS = 5, 11, (2, 5, 8)
SOLO = Group("0xsolo", "Solo", "Broadcast", 1 << 20, 300.0, ranks=(0,))
RUN = Run(run="synth", ranks=16, windows=12, groups=(*DEFAULT_GROUPS, SOLO),
          stragglers=(Straggler(PERSISTENT, 15_000.0),
                      Straggler(INTERMITTENT, 25_000.0, SLOW_WINDOWS)))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    # Per test: chDB opens one folder per process, and other tests open their own.
    with Store.connect(f"chdb://{tmp_path / 'store'}") as opened:
        opened.insert_arrow("collectives", samples(RUN))
        yield opened


def _index(report: stragglers.StragglerReport) -> dict[object, int]:
    starts = sorted({w.window_start for w in report.windows})
    return {start: i for i, start in enumerate(starts)}


def test_the_injected_straggler_is_last_in_every_window_it_is_not_outrun(store) -> None:
    report = analyze(store, RUN.run, 30)
    index = _index(report)
    assert len(index) == RUN.windows and len(report.windows) == RUN.windows * 3
    for window in report.windows:
        slow = index[window.window_start] in SLOW_WINDOWS
        assert window.last_rank == (INTERMITTENT if slow else PERSISTENT)
        assert window.ranks == RUN.ranks
        delay = 25_000 if slow else 15_000
        assert delay * 0.85 < window.skew_us < delay * 1.1  # the arrival delay, not the noise
        assert dict(window.waiting_us)[window.last_rank] == 0.0
        group = next(g for g in DEFAULT_GROUPS if (g.comm_id, g.msg_size_bytes) ==
                     (window.comm_id, window.msg_size_bytes))
        assert group.transfer_us <= window.transfer_us < group.transfer_us * 1.1


def test_the_persistent_table_ranks_the_straggler_first_and_maps_it_to_pod_and_node(store):
    report = analyze(store, RUN.run, 30)
    first, second = report.ranks[:2]
    assert (first.rank, first.pod, first.node) == (PERSISTENT, "synth-worker-0",
                                                   "gke-a3-node-0000")
    assert (first.times_last, first.groups, first.windows_last) == (27, 36, 9)
    assert 13_000 < first.mean_skew_us < 17_000 and first.mean_waiting_us < 3_000
    assert (second.rank, second.times_last, second.windows_last) == (INTERMITTENT, 9, 3)
    assert second.node == "gke-a3-node-0001"
    assert [r.rank for r in report.persistent()] == [PERSISTENT]
    assert all(r.times_last == 0 for r in report.ranks[2:])
    assert report.conclusion().startswith(
        "rank 5 (pod synth-worker-0, node gke-a3-node-0000) arrived last in 9/12 windows "
        "(27/36 collective groups), mean skew 15.")


def test_a_group_seen_from_one_rank_is_left_out(store) -> None:
    report = analyze(store, RUN.run, 30)
    assert SOLO.comm_id not in {w.comm_id for w in report.windows}
    assert all(r.groups == 36 for r in report.ranks)  # the solo group counts for no one


def test_buckets_and_samples_give_the_same_answer(store) -> None:
    bucketed = analyze(store, RUN.run, 60)
    assert bucketed.source == stragglers.GROUPS
    raw = store.query(sql_file("straggler_windows.sql"),
                      {"run": RUN.run, "window_s": 60, "source": stragglers.SAMPLES,
                       "rows": stragglers.SAMPLES,
                       "groups_per_window": stragglers.EVERY_GROUP}).dicts()
    assert [(w["last_rank"], w["ranks"]) for w in raw] == \
        [(w.last_rank, w.ranks) for w in bucketed.windows]
    for row, window in zip(raw, bucketed.windows, strict=True):
        assert row["skew_us"] == pytest.approx(window.skew_us, rel=1e-9)
    tens = analyze(store, RUN.run, 20)  # 10 s buckets, not 30 s ones
    assert tens.source == stragglers.BUCKETS and len(_index(tens)) == RUN.windows * 3 // 2
    odd = analyze(store, RUN.run, 15)  # not a whole number of 10 s buckets: every sample
    assert odd.source == stragglers.SAMPLES and len(_index(odd)) == 2 * RUN.windows


def test_incomplete_buckets_fall_back_to_the_samples(tmp_path) -> None:
    run = replace(RUN, run="partial", windows=3, stragglers=(Straggler(PERSISTENT, 15_000.0),))
    with Store.connect(f"chdb://{tmp_path / 'store'}") as opened:
        opened.insert_arrow("collectives", samples(run))
        opened.command("DELETE FROM collective_group_buckets WHERE comm_id = '0xtp02'")
        assert analyze(opened, run.run, 30).source == stragglers.BUCKETS
        opened.command("DELETE FROM collective_buckets WHERE rank = 3")
        report = analyze(opened, run.run, 30)
    assert report.source == stragglers.SAMPLES and report.ranks[0].rank == PERSISTENT
    assert all(w.ranks == run.ranks for w in report.windows)


def test_migrating_a_store_with_samples_fills_their_buckets(tmp_path) -> None:
    run = replace(RUN, run="older", windows=3)
    with Store.connect(f"chdb://{tmp_path / 'store'}", migrate=False) as opened:
        migrate_until(opened, 2)  # a store made before the buckets existed
        opened.insert_arrow("collectives", samples(run))
        applied = opened.migrate()
        assert {"0003_collective_buckets.sql", "0010_collective_groups.sql"} <= set(applied)
        assert stragglers.source(opened, run.run, 30) == stragglers.GROUPS
        opened.command("DELETE FROM schema_migrations WHERE version IN (3, 10)")
        opened.migrate()  # a re-run skips the run it filled: no sample counted twice
        assert stragglers.source(opened, run.run, 30) == stragglers.GROUPS


def test_an_unknown_run_says_so_and_how_to_find_runs(store) -> None:
    with pytest.raises(NoSamples) as raised:
        analyze(store, "no-such-run")
    message = str(raised.value)
    assert "run 'no-such-run' has no collective samples" in message
    assert "gkr telemetry sql" in message and "gkr telemetry ingest" in message


def test_a_run_of_one_rank_per_group_has_nothing_to_compare(tmp_path) -> None:
    alone = Run(run="alone", ranks=1, windows=2, groups=(SOLO,), stragglers=())
    with Store.connect(f"chdb://{tmp_path / 'store'}") as opened:
        opened.insert_arrow("collectives", samples(alone))
        with pytest.raises(NoSamples, match="from two or more ranks of one group"):
            analyze(opened, "alone")


def test_a_window_under_a_second_is_refused(store) -> None:
    with pytest.raises(stragglers.BadWindow, match="at least 1 second"):
        analyze(store, RUN.run, 0)


def test_waiting_is_fetched_for_the_chosen_ranks_only(store: Store) -> None:
    full = analyze(store, RUN.run, 30)
    chosen = analyze(store, RUN.run, 30, waiting_ranks=[PERSISTENT, 0])
    picked = analyze(store, RUN.run, 30, waiting_ranks=lambda ranks: [ranks[0].rank])
    assert [r.rank for r in chosen.ranks] == [r.rank for r in full.ranks]
    for every, two, one in zip(full.windows, chosen.windows, picked.windows, strict=True):
        assert (two.window_start, two.comm_id, two.last_rank, two.ranks) == \
            (every.window_start, every.comm_id, every.last_rank, every.ranks)
        assert two.skew_us == pytest.approx(every.skew_us, rel=1e-9)
        wanted = [w for w in every.waiting_us if w[0] in (0, PERSISTENT)]
        assert [w[0] for w in two.waiting_us] == [0, PERSISTENT]
        assert [w[1] for w in two.waiting_us] == pytest.approx([w[1] for w in wanted])
        assert [w[0] for w in one.waiting_us] == [PERSISTENT]  # the report's first rank


def test_both_queries_begin_with_the_same_steps() -> None:
    """straggler_ranks.sql repeats straggler_windows.sql's first steps: one method, kept equal
    here; and both leave out the ranks migration 0010 leaves out."""
    def steps(name: str) -> str:
        text = sql_file(name)
        return text[text.index("WITH\n"):text.index("\ngroups AS\n")]

    assert steps("straggler_windows.sql") == steps("straggler_ranks.sql")
    bound = "rank BETWEEN 0 AND 1048575"
    schema = next(sql for _, name, sql in migrations() if name == "0010_collective_groups.sql")
    assert bound in steps("straggler_windows.sql") and bound in schema
    assert sql_file("straggler_source.sql").count(bound) == 2


def test_migrating_a_store_with_samples_records_their_communicators(tmp_path: Path) -> None:
    run = replace(RUN, run="older", windows=2)
    with Store.connect(f"chdb://{tmp_path / 'store'}", migrate=False) as opened:
        migrate_until(opened, 5)  # a store made before the communicators' members were kept
        opened.insert_arrow("collectives", samples(run))
        assert "0006_global_ranks.sql" in opened.migrate()
        assert opened.query(
            "SELECT comm_id, uniqExact(rank), max(n_ranks) FROM comm_members WHERE run = "
            "'older' GROUP BY comm_id ORDER BY comm_id").rows == [
            ("0xdp01", 16, 16), ("0xsolo", 1, 1), ("0xtp02", 16, 16)]
        assert analyze(opened, run.run, 30).ranks[0].rank == PERSISTENT
