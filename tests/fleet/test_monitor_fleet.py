"""The FleetMonitor at fleet scale, reduced: 256 ranks reporting. Its memory stays bounded by
the window whether or not summaries are asked for, and by SLICE_CAP however much one second
brings; its summaries are the exact percentiles of the window's values below the cap; the
fleet-sized report interval keeps the monitor's call rate flat; and the real actor, fed by the
benchmark's reporter actors, summarises what they sent."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.fleet import Fleet
from benchmarks.fleet.monitor import PIECE, SERVICE, measure, transfer_times
from runtime.fleet import (
    MONITOR_REPORTS_PER_S,
    SLICE_CAP,
    ClientSample,
    FleetState,
    report_interval,
)

RANKS, SAMPLES, WINDOW_S = 256, 8, 30.0


def _report_second(state: FleetState, second: int) -> list[float]:
    """Every rank's report in one second, spread over it; the values sent."""
    sent = []
    for rank in range(RANKS):
        values = transfer_times(rank + second, SAMPLES)
        state.record_client(ClientSample(SERVICE, rank, values),
                            now=second + rank / RANKS)
        sent += values
    return sent


def test_memory_is_bounded_by_the_window_without_any_summary() -> None:
    state = FleetState(window_s=WINDOW_S)
    most = RANKS * SAMPLES * (WINDOW_S + 1)  # a slice may outstay the window by a second
    for second in range(120):  # four windows; nobody asks for summaries
        _report_second(state, second)
        assert state.held() <= most
    assert state.held() >= RANKS * SAMPLES * WINDOW_S


def test_summaries_are_the_exact_percentiles_of_the_window() -> None:
    state = FleetState(window_s=WINDOW_S)
    sent = [_report_second(state, second) for second in range(60)]
    in_window = np.concatenate(sent[30:])  # seconds 30-59: the window as of 60.0
    summary = state.summaries(now=60.0)[SERVICE]
    assert summary.transfer_ms_p50 == pytest.approx(np.percentile(in_window, 50) * 1e3)
    assert summary.transfer_ms_p99 == pytest.approx(np.percentile(in_window, 99) * 1e3)
    assert summary.queue_wait_ms_p50 is None  # no worker reported


def test_a_flood_in_one_second_keeps_a_bounded_uniform_sample() -> None:
    state = FleetState(window_s=WINDOW_S)
    rng = np.random.default_rng(7)
    flood = rng.uniform(0.0, 0.010, 10 * SLICE_CAP)  # 10 ms uniform, in one second
    for chunk in np.array_split(flood, 1_000):
        state.record_client(ClientSample(SERVICE, 0, chunk.tolist()), now=5.5)
    state.record_client(ClientSample(SERVICE, 1, [0.004] * 1_000), now=6.5)  # a quiet second
    assert state.held() < 2 * SLICE_CAP + 1_000
    summary = state.summaries(now=7.0)[SERVICE]
    truth = np.percentile(np.concatenate([flood, [0.004] * 1_000]), [50, 99]) * 1e3
    assert summary.transfer_ms_p50 == pytest.approx(truth[0], rel=0.02)
    assert summary.transfer_ms_p99 == pytest.approx(truth[1], rel=0.02)


def test_the_fleet_sized_interval_keeps_the_monitors_rate_flat() -> None:
    assert report_interval(1.0, 256) == 1.0  # a small run reports as configured
    for ranks in (2_000, 10_000, 40_000):
        assert ranks / report_interval(1.0, ranks) == MONITOR_REPORTS_PER_S
    assert report_interval(30.0, 10_000) == 30.0  # never shorter than configured


@pytest.mark.slow
def test_the_actor_summarises_what_the_ranks_sent() -> None:
    """The real actor, 256 ranks reporting for a few seconds from a reporter actor; the
    benchmark checks the summary (raising when it is off) and gives its figures."""
    figures = {f.name: f for f in measure(Fleet(RANKS // 8), seconds=3.0, samples=SAMPLES,
                                          reporters=1)}
    assert all(f.piece == PIECE for f in figures.values())
    held = figures["latency values held, 1 s"].value
    assert 0 < held <= RANKS * SAMPLES * 5  # three seconds and the last call's, no more
    assert figures["actor cores the rate needs, 1 s"].goal == 1.0
    assert figures["reports/s offered, sized"].value == RANKS  # 256 ranks: one a second
