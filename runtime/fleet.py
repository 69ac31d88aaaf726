"""FleetMonitor (seed §8.2): one Ray actor aggregating what auxiliary services report.

Workers report queue wait, processing time, errors and pending work; proxies report work in
flight and how many workers are ready. A training callback (`FleetReporter`) fetches the
per-service summaries and hands them to sinks: the log now, ClickHouse later, through the
narrow `FleetSink` protocol.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ClientSample",
    "FleetReporter",
    "FleetSink",
    "FleetState",
    "LogSink",
    "ProxySample",
    "ServiceSummary",
    "WorkerSample",
    "monitor_name",
    "start_monitor",
]

log = logging.getLogger(__name__)


@dataclass
class WorkerSample:
    """What one auxiliary worker observed since its previous report."""

    service: str
    worker: str
    incarnation: str
    served: int
    errors: int
    pending: int
    queue_wait_s: list[float] = field(default_factory=list)
    process_s: list[float] = field(default_factory=list)


@dataclass
class ClientSample:
    """What one training rank observed: round trip minus queue wait and processing."""

    service: str
    rank: int
    transfer_s: list[float] = field(default_factory=list)


@dataclass
class ProxySample:
    """What one per-node proxy holds now."""

    service: str
    proxy: str
    in_flight: int
    waiting: int
    ready_workers: int


@dataclass(frozen=True)
class ServiceSummary:
    """One service over the monitor's window: latency split, backlog, rate and health."""

    service: str
    throughput_rps: float
    queue_wait_ms_p50: float | None  # None: no sample in the window
    queue_wait_ms_p99: float | None
    process_ms_p50: float | None
    process_ms_p99: float | None
    transfer_ms_p50: float | None
    transfer_ms_p99: float | None
    pending: int
    workers_healthy: int
    workers_known: int
    restarts: int
    errors: int

    def line(self) -> str:
        """One human-readable line."""
        return (
            f"{self.service}: {self.throughput_rps:.1f} req/s, queue wait p50/p99 "
            f"{_pair_ms(self.queue_wait_ms_p50, self.queue_wait_ms_p99)}, processing p50/p99 "
            f"{_pair_ms(self.process_ms_p50, self.process_ms_p99)}, transfer p50/p99 "
            f"{_pair_ms(self.transfer_ms_p50, self.transfer_ms_p99)}, pending "
            f"{self.pending}, workers {self.workers_healthy}/{self.workers_known} healthy, "
            f"restarts {self.restarts}, errors {self.errors}"
        )


def _pair_ms(p50: float | None, p99: float | None) -> str:
    """`p50/p99 ms`, or `n/a` when the window holds no sample (zeros would read as fast)."""
    if p50 is None or p99 is None:
        return "n/a"
    return f"{p50:.2f}/{p99:.2f} ms"


@dataclass
class _ServiceWindow:
    waits: deque[tuple[float, float]] = field(default_factory=deque)
    processing: deque[tuple[float, float]] = field(default_factory=deque)
    transfer: deque[tuple[float, float]] = field(default_factory=deque)
    served: deque[tuple[float, int]] = field(default_factory=deque)
    errors: int = 0
    seen: dict[str, float] = field(default_factory=dict)  # worker -> last report time
    incarnations: dict[str, str] = field(default_factory=dict)
    restarts: int = 0
    pending: dict[str, int] = field(default_factory=dict)  # worker or proxy -> backlog


def _percentile_ms(samples: Iterable[tuple[float, float]], q: float) -> float | None:
    values = [value for _, value in samples]
    return float(np.percentile(values, q)) * 1e3 if values else None


class FleetState:
    """The aggregation itself, kept free of Ray so that it can be tested directly."""

    def __init__(self, window_s: float = 30.0, stale_after_s: float = 5.0) -> None:
        self.window_s, self.stale_after_s = window_s, stale_after_s
        self._services: dict[str, _ServiceWindow] = {}

    def record_worker(self, sample: WorkerSample, now: float | None = None) -> None:
        """Fold one worker report into its service's window."""
        now = time.time() if now is None else now
        window = self._services.setdefault(sample.service, _ServiceWindow())
        window.waits.extend((now, value) for value in sample.queue_wait_s)
        window.processing.extend((now, value) for value in sample.process_s)
        window.served.append((now, sample.served))
        window.errors += sample.errors
        window.pending[sample.worker] = sample.pending
        window.seen[sample.worker] = now
        previous = window.incarnations.get(sample.worker)
        if previous is not None and previous != sample.incarnation:
            window.restarts += 1
        window.incarnations[sample.worker] = sample.incarnation

    def record_client(self, sample: ClientSample, now: float | None = None) -> None:
        """Fold one rank's transfer times into its service's window."""
        now = time.time() if now is None else now
        window = self._services.setdefault(sample.service, _ServiceWindow())
        window.transfer.extend((now, value) for value in sample.transfer_s)

    def record_proxy(self, sample: ProxySample) -> None:
        """Remember the proxy's backlog (in flight plus waiting for a worker)."""
        window = self._services.setdefault(sample.service, _ServiceWindow())
        window.pending[f"proxy:{sample.proxy}"] = sample.waiting

    def summaries(self, now: float | None = None) -> dict[str, ServiceSummary]:
        """Per-service summaries over the `window_s` seconds up to `now` (default: the present).

        A past `now` (the last training step, once the services have stopped) judges health
        at that moment; reports recorded after it still count, since a report describes work
        already done.
        """
        now = time.time() if now is None else now
        return {name: self._summary(name, window, now) for name, window in self._services.items()}

    def _summary(self, name: str, window: _ServiceWindow, now: float) -> ServiceSummary:
        for samples in (window.waits, window.processing, window.transfer, window.served):
            while samples and samples[0][0] < now - self.window_s:
                samples.popleft()
        span = max(now - window.served[0][0], 1.0) if window.served else 1.0
        # A worker whose last report came after `now` was alive at `now`.
        healthy = sum(1 for t in window.seen.values() if now - t <= self.stale_after_s)
        return ServiceSummary(
            service=name,
            throughput_rps=sum(n for _, n in window.served) / span,
            queue_wait_ms_p50=_percentile_ms(window.waits, 50),
            queue_wait_ms_p99=_percentile_ms(window.waits, 99),
            process_ms_p50=_percentile_ms(window.processing, 50),
            process_ms_p99=_percentile_ms(window.processing, 99),
            transfer_ms_p50=_percentile_ms(window.transfer, 50),
            transfer_ms_p99=_percentile_ms(window.transfer, 99),
            pending=sum(window.pending.values()),
            workers_healthy=healthy,
            workers_known=len(window.seen),
            restarts=window.restarts,
            errors=window.errors,
        )


def monitor_name(run_id: str) -> str:
    """The named-actor name of a run's FleetMonitor."""
    return f"gkr-fleet-{run_id}"


def start_monitor(run_id: str, stale_after_s: float) -> Any:
    """Start the run's FleetMonitor actor (no CPU reserved: it only aggregates)."""
    import ray  # lazily: the aggregation above is usable without Ray

    actor = ray.remote(num_cpus=0, max_restarts=-1)(FleetState)
    return actor.options(name=monitor_name(run_id), lifetime=None).remote(
        stale_after_s=stale_after_s
    )


class FleetSink(Protocol):
    """Where summaries go: the log now, ClickHouse telemetry later."""

    def emit(self, step: int, summaries: Mapping[str, ServiceSummary]) -> None:
        """Record the summaries taken at training step `step`."""


class LogSink:
    """Writes each service's summary as one line to the log, or to stdout with `echo`."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo

    def emit(self, step: int, summaries: Mapping[str, ServiceSummary]) -> None:
        """One line per service."""
        for summary in summaries.values():
            text = f"fleet step {step}: {summary.line()}"
            if self.echo:
                print(text, flush=True)
            else:
                log.info(text)


class FleetReporter:
    """Training callback: every `every` steps, fetch summaries and hand them to each sink."""

    def __init__(self, monitor: Any, sinks: Sequence[FleetSink], every: int) -> None:
        self.monitor, self.sinks, self.every = monitor, list(sinks), every

    def after_step(self, step: int) -> None:
        """Report when `step` is a multiple of `every` (0 disables)."""
        if self.every and step % self.every == 0:
            self.report(step)

    def report(self, step: int, now: float | None = None) -> dict[str, ServiceSummary]:
        """Fetch the summaries as of `now` (None: the present) and emit them; returns them."""
        import ray

        summaries = ray.get(self.monitor.summaries.remote(now), timeout=30)
        for sink in self.sinks:
            sink.emit(step, summaries)
        return summaries


def summary_dict(summary: ServiceSummary) -> dict[str, Any]:
    """A plain dict, for sinks that store rows."""
    return asdict(summary)
