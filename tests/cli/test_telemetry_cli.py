"""`gkr stragglers` and `gkr telemetry sql` on an embedded store filled with synthetic samples
of known stragglers (testing/synthetic.py)."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.telemetry.store import Store
from testing.synthetic import DEFAULT_GROUPS, Straggler, samples
from tests.cli.conftest import gkr, gkr_process
from tests.telemetry.test_stragglers import INTERMITTENT, PERSISTENT, RUN

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture
def dsn(tmp_path: Path) -> str:
    """A store holding RUN; closed again, so that `gkr` can open it."""
    found = f"chdb://{tmp_path / 'telemetry'}"
    with Store.connect(found) as store:
        store.insert_arrow("collectives", samples(RUN))
    return found


def test_stragglers_prints_windows_the_persistent_table_and_a_conclusion(dsn) -> None:
    ran = gkr("stragglers", RUN.run, "--dsn", dsn)
    assert ran.code == 0, ran.err
    windows, ranks, conclusion = ran.out.strip().split("\n\n")
    lines = windows.splitlines()
    assert lines[0].split() == ["WINDOW", "GROUP", "RANKS", "LAST", "SKEW", "MS", "WAIT",
                                "P50", "MS", "TRANSFER", "MS"]
    assert len(lines) == 1 + RUN.windows * 3  # a line per window and group, not per rank
    assert RFC3339.match(lines[1].split()[0])
    assert lines[1].split()[1:6] == ["DP", "Group", "0", "AllReduce", "4MiB"]
    last = [line.split()[-4] for line in lines[1:]]
    assert last.count(str(PERSISTENT)) == 27 and last.count(str(INTERMITTENT)) == 9
    first, second = ranks.splitlines()[1:]
    assert first.split()[:5] == [str(PERSISTENT), "synth-worker-0", "gke-a3-node-0000", "9/12",
                                 "27/36"]
    assert second.split()[:4] == [str(INTERMITTENT), "synth-worker-1", "gke-a3-node-0001",
                                  "3/12"]
    assert re.fullmatch(r"rank 5 \(pod synth-worker-0, node gke-a3-node-0000\) arrived last "
                        r"in 9/12 windows \(27/36 collective groups\), mean skew 1[45]\.\d ms",
                        conclusion)


def test_stragglers_json_has_every_ranks_waiting(dsn) -> None:
    ran = gkr("stragglers", RUN.run, "--dsn", dsn, "-o", "json", "--window", "1m")
    report = json.loads(ran.out)[0]
    assert report["window_s"] == 60 and len(report["windows"]) == RUN.windows // 2 * 3
    window = report["windows"][0]
    assert RFC3339.match(window["window_start"])
    assert [rank for rank, _ in window["waiting_us"]] == list(range(RUN.ranks))
    assert len(report["ranks"]) == RUN.ranks and report["ranks"][0]["rank"] == PERSISTENT
    assert report["conclusion"].startswith(f"rank {PERSISTENT} (pod synth-worker-0")


@pytest.mark.parametrize(("flag", "windows"), [("30s", 12), ("1m", 6), ("90", 4), ("3m", 2)])
def test_window_lengths(dsn, flag: str, windows: int) -> None:
    report = json.loads(gkr("stragglers", RUN.run, "--dsn", dsn, "-o", "json",
                            "--window", flag).out)[0]
    assert len({w["window_start"] for w in report["windows"]}) == windows


def test_a_bad_window_or_an_unknown_run_is_a_one_line_error(dsn) -> None:
    bad = gkr("stragglers", RUN.run, "--dsn", dsn, "--window", "half a minute")
    assert bad.code == 2 and "a duration such as 30s, 1m or 90 (seconds)" in bad.err
    unknown = gkr("stragglers", "no-such-run", "--dsn", dsn)
    assert unknown.code == 1 and unknown.out == ""
    assert unknown.err.startswith("error: run 'no-such-run' has no collective samples")
    assert len(unknown.err.strip().splitlines()) == 1 and "Traceback" not in unknown.err


def test_a_ten_thousand_rank_layout_stays_short(tmp_path) -> None:
    wide = replace(RUN, run="wide", ranks=1000, windows=3, groups=DEFAULT_GROUPS[:1],
                   stragglers=(Straggler(777, 15_000.0),))
    dsn = f"chdb://{tmp_path / 'telemetry'}"
    with Store.connect(dsn) as store:
        store.insert_arrow("collectives", samples(wide))
    ran = gkr("stragglers", "wide", "--dsn", dsn, "--top", "3")
    windows, ranks, conclusion = ran.out.strip().split("\n\n")
    assert len(windows.splitlines()) == 1 + 3 and len(ranks.splitlines()) == 1 + 1
    assert conclusion.startswith("rank 777 (pod wide-worker-97, node gke-a3-node-0097) "
                                 "arrived last in 3/3 windows")


def test_sql_binds_parameters_and_prints_a_table(dsn) -> None:
    ran = gkr("telemetry", "sql", "SELECT rank, count() AS samples FROM collectives WHERE "
              "run = {run:String} AND rank < {below:Int32} GROUP BY rank ORDER BY rank",
              "--param", "run=synth", "-p", "below=2", "--dsn", dsn)
    assert ran.code == 0, ran.err
    per_op = RUN.windows * RUN.per_window
    assert [line.split() for line in ran.out.splitlines()] == [
        ["rank", "samples"], ["0", str(per_op * 4)], ["1", str(per_op * 3)]]


def test_sql_json_and_csv(dsn) -> None:
    query = "SELECT max(ts) AS last, 'a,b' AS text, [1, 2] AS list FROM collectives"
    row = json.loads(gkr("telemetry", "sql", query, "-o", "json", "--dsn", dsn).out)[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", row["last"])
    assert row["text"] == "a,b" and row["list"] == [1, 2]
    rows = list(csv.reader(io.StringIO(gkr("telemetry", "sql", query, "-o", "csv", "--dsn",
                                           dsn).out)))
    assert rows[0] == ["last", "text", "list"] and rows[1][1] == "a,b"


def test_sql_errors_are_clickhouses_message_on_one_line(dsn) -> None:
    ran = gkr("telemetry", "sql", "SELECT nope FROM collectives", "--dsn", dsn)
    assert ran.code == 1 and ran.out == ""
    assert ran.err.startswith(f"error: telemetry store {dsn}: Code: 47. DB::Exception: ")
    assert ran.err.rstrip().endswith("(UNKNOWN_IDENTIFIER)")
    assert len(ran.err.strip().splitlines()) == 1
    bad = gkr("telemetry", "sql", "SELECT 1", "--param", "no equals sign", "--dsn", dsn)
    assert bad.code == 2 and "use NAME=VALUE" in bad.err


def test_stragglers_as_a_user_runs_it(dsn, tmp_path) -> None:
    """A fresh process on the default store ($GKR_TELEMETRY_DSN), output piped."""
    ran = gkr_process("stragglers", RUN.run, cwd=tmp_path, env={"GKR_TELEMETRY_DSN": dsn})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().splitlines()[-1].startswith(f"rank {PERSISTENT} (pod ")


def test_the_table_keeps_each_windows_groups_of_largest_skew(dsn) -> None:
    """`--groups N`: a fleet's window has a group per communicator; the table shows the N of
    largest skew (in the usual order), 0 all; the ranks table and conclusion are the same."""
    def table(*flags: str) -> tuple[list[str], str]:
        ran = gkr("stragglers", RUN.run, "--dsn", dsn, *flags)
        assert ran.code == 0, ran.err
        windows, ranks, _ = ran.out.strip().split("\n\n")
        return windows.splitlines()[1:], ranks

    every, ranks = table("--groups", "0")
    one, one_ranks = table("--groups", "1")
    assert len(every) == RUN.windows * 3 and len(one) == RUN.windows and one_ranks == ranks
    for line in one:  # its window's group of largest skew (SKEW MS: third from the right)
        skews = [float(other.split()[-3]) for other in every if other[:20] == line[:20]]
        assert float(line.split()[-3]) == max(skews) and line in every
    assert table()[0] == every  # three groups a window: the default keeps them all
