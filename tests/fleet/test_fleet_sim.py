"""The fleet simulation's one command (benchmarks/fleet_sim.py) at a reduced size: every
piece's figures in one table, a column per fleet size. Warden and the FleetMonitor have their
own reduced tests beside this one (they run for a set simulated time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fleet_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks.fleet_sim", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=300)


def rows(table: str) -> dict[tuple[str, str], list[str]]:
    """(piece, figure) -> the cells of that figure's row, one per size."""
    found = {}
    for line in table.splitlines()[1:]:
        piece, name = line[:11].strip(), line[11:55].strip()
        found[(piece, name)] = line[55:].split()
    return found


@pytest.mark.slow
def test_one_command_prints_every_figure_at_every_size() -> None:
    done = fleet_sim("--nodes", "8,16", "--pieces", "planner,render,stragglers")
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    assert int(table[("planner", "training world size")][0]) < int(
        table[("planner", "training world size")][1])  # twice the nodes, more ranks
    assert table[("render", "job specs")][:2] == ["64", "128"]  # one spec per GPU
    assert table[("stragglers", "gkr stragglers (CLI, fresh process)")][2] == "s"
    assert all(cells[0] != "-" and cells[1] != "-" for cells in table.values())


def test_an_unknown_piece_is_refused_with_the_choices() -> None:
    done = fleet_sim("--nodes", "8", "--pieces", "planner,kueue")
    assert done.returncode == 2
    assert "unknown piece(s) kueue; choose from planner, render, warden" in done.stderr


def test_sizes_that_are_not_node_counts_are_refused() -> None:
    for bad in ("x,2", "0", ""):
        done = fleet_sim("--nodes", bad)
        assert done.returncode == 2 and "give node counts >= 1" in done.stderr, bad
