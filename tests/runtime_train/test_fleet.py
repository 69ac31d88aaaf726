"""FleetMonitor aggregation (pure); the Ray actor and the reporter are exercised in
test_aux_ray.py and test_run_local.py."""

from __future__ import annotations

import pytest

from runtime.fleet import ClientSample, FleetState, ProxySample, WorkerSample


def _sample(worker: str, incarnation: str, served: int, waits: list[float]) -> WorkerSample:
    return WorkerSample("enc", worker, incarnation, served, errors=1, pending=2,
                        queue_wait_s=waits, process_s=[0.010] * len(waits))


def test_summary_combines_workers_proxies_and_restarts() -> None:
    state = FleetState(window_s=30, stale_after_s=5)
    state.record_worker(_sample("w0", "a", 10, [0.001] * 10), now=100.0)
    state.record_worker(_sample("w1", "b", 10, [0.003] * 10), now=100.0)
    state.record_worker(_sample("w0", "c", 10, [0.001] * 10), now=110.0)  # w0 restarted
    state.record_proxy(ProxySample("enc", "node-a", in_flight=3, waiting=4, ready_workers=2))
    summary = state.summaries(now=111.0)["enc"]
    assert summary.restarts == 1
    assert summary.errors == 3
    assert summary.pending == 2 + 2 + 4
    assert summary.throughput_rps == pytest.approx(30 / 11)
    assert summary.queue_wait_ms_p50 == pytest.approx(1.0)
    assert summary.process_ms_p99 == pytest.approx(10.0)
    assert (summary.workers_healthy, summary.workers_known) == (1, 2)  # w1 went silent


def test_old_samples_leave_the_window() -> None:
    state = FleetState(window_s=10)
    state.record_worker(_sample("w0", "a", 5, [0.5] * 5), now=0.0)
    state.record_worker(_sample("w0", "a", 5, [0.001] * 5), now=20.0)
    summary = state.summaries(now=21.0)["enc"]
    assert summary.queue_wait_ms_p99 == pytest.approx(1.0)


def test_transfer_time_comes_from_the_ranks() -> None:
    state = FleetState()
    state.record_worker(_sample("w0", "a", 2, [0.001, 0.001]), now=5.0)
    state.record_client(ClientSample("enc", rank=3, transfer_s=[0.0002, 0.0004]), now=5.0)
    summary = state.summaries(now=6.0)["enc"]
    assert summary.transfer_ms_p50 == pytest.approx(0.3)
    assert "transfer p50/p99 0.30/" in summary.line()


def test_a_window_without_samples_reads_n_a_not_zero() -> None:
    state = FleetState()
    state.record_worker(_sample("w0", "a", 2, [0.001, 0.001]), now=5.0)
    summary = state.summaries(now=6.0)["enc"]
    assert summary.transfer_ms_p50 is None
    assert "transfer p50/p99 n/a," in summary.line()
    assert "queue wait p50/p99 1.00/1.00 ms" in summary.line()


def test_a_summary_as_of_the_last_step_judges_health_then_and_counts_later_reports() -> None:
    """The driver's final summary is taken as of the last step, after the services stopped;
    a report that arrives after that step describes work done before it."""
    state = FleetState(window_s=30, stale_after_s=5)
    state.record_worker(_sample("w0", "a", 10, [0.001] * 10), now=100.0)
    state.record_worker(_sample("w0", "a", 10, [0.009] * 10), now=103.0)
    as_of = state.summaries(now=102.0)["enc"]
    assert (as_of.workers_healthy, as_of.workers_known) == (1, 1)
    assert as_of.throughput_rps == pytest.approx(20 / 2.0)
    assert as_of.queue_wait_ms_p99 == pytest.approx(9.0)
    assert state.summaries(now=120.0)["enc"].workers_healthy == 0  # later: silent for 17 s
