"""FleetMonitor (seed §8.2): one Ray actor aggregating what auxiliary services report.

Workers report queue wait, processing time, errors and pending work; proxies report work in
flight and how many workers are ready. A training callback (`FleetReporter`) fetches the
per-service summaries and hands them to sinks: the log now, ClickHouse later, through the
narrow `FleetSink` protocol.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections import deque
from collections.abc import Mapping, Sequence
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
    "report_interval",
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


SLICE_S = 1.0  # a window's values are kept per second of arrival
SLICE_CAP = 65_536  # values kept per measure and slice; beyond it, a uniform sample of them


@dataclass
class _Slice:
    """The values of one measure that arrived in one SLICE_S, packed (8 bytes a value)."""

    start: float
    values: array[float] = field(default_factory=lambda: array("d"))
    stride: int = 1  # each value kept stands for `stride` values reported

    def add(self, values: Sequence[float], rng: np.random.Generator) -> None:
        """Keep the values; past 2 x SLICE_CAP, keep a random half and from then on each new
        value with the probability the kept ones had, so the slice stays a uniform sample."""
        if self.stride == 1:
            self.values.extend(values)
        else:
            new = np.asarray(values, dtype=float)
            self.values.frombytes(new[rng.random(new.size) < 1 / self.stride].tobytes())
        if len(self.values) >= 2 * SLICE_CAP:
            packed = np.frombuffer(self.values, dtype=float)
            self.values = array("d", packed[rng.random(packed.size) < 0.5].tobytes())
            self.stride *= 2


class _Series:
    """One measure's values over the window, oldest slice first.

    Memory is 8 bytes a value and one slice a second, and at most SLICE_CAP values a slice
    (benchmarks/fleet/monitor.py: 10,000 ranks reporting; a value a Python tuple was ~90
    bytes, and the summary walked them in Python). Slices are dropped once wholly older than
    the window, so a value may outstay it by up to SLICE_S.
    """

    def __init__(self, rng: np.random.Generator) -> None:
        self.slices: deque[_Slice] = deque()
        self.rng = rng

    def add(self, now: float, values: Sequence[float]) -> None:
        if not values:
            return
        start = now - now % SLICE_S
        if not self.slices or start > self.slices[-1].start:  # a late report joins the last
            self.slices.append(_Slice(start))
        self.slices[-1].add(values, self.rng)

    def trim(self, cutoff: float) -> None:
        while self.slices and self.slices[0].start + SLICE_S <= cutoff:
            self.slices.popleft()

    def __len__(self) -> int:
        return sum(len(s.values) for s in self.slices)

    def percentiles_ms(self, q: Sequence[float]) -> list[float] | None:
        """Percentiles in ms; None without values. Slices sampled more sparsely than others
        (a busier second) are matched by sampling the others as sparsely, so every value of
        the window has the same chance to count."""
        kept = [s for s in self.slices if s.values]
        if not kept:
            return None
        top = max(s.stride for s in kept)
        parts = []
        for piece in kept:
            values = np.frombuffer(piece.values, dtype=float)
            if piece.stride < top:
                values = values[self.rng.random(values.size) < piece.stride / top]
            parts.append(values)
        return [float(v) * 1e3 for v in np.percentile(np.concatenate(parts), q)]


@dataclass
class _ServiceWindow:
    waits: _Series
    processing: _Series
    transfer: _Series
    served: deque[tuple[float, int]] = field(default_factory=deque)  # one per worker report
    errors: int = 0
    seen: dict[str, float] = field(default_factory=dict)  # worker -> last report time
    incarnations: dict[str, str] = field(default_factory=dict)
    restarts: int = 0
    pending: dict[str, int] = field(default_factory=dict)  # worker or proxy -> backlog

    @classmethod
    def empty(cls, rng: np.random.Generator) -> _ServiceWindow:
        return cls(_Series(rng), _Series(rng), _Series(rng))

    def trim(self, cutoff: float) -> None:
        """Forget what is older than `cutoff`: memory stays bounded by the window whether or
        not anyone asks for summaries."""
        for series in (self.waits, self.processing, self.transfer):
            series.trim(cutoff)
        while self.served and self.served[0][0] < cutoff:
            self.served.popleft()


class FleetState:
    """The aggregation itself, kept free of Ray so that it can be tested directly."""

    def __init__(self, window_s: float = 30.0, stale_after_s: float = 5.0) -> None:
        self.window_s, self.stale_after_s = window_s, stale_after_s
        self._services: dict[str, _ServiceWindow] = {}
        self._rng = np.random.default_rng(0)  # sampling past SLICE_CAP: reproducible

    def _window(self, service: str, now: float | None = None) -> _ServiceWindow:
        """The service's window, trimmed as of `now` when given."""
        window = self._services.get(service)
        if window is None:
            window = self._services[service] = _ServiceWindow.empty(self._rng)
        if now is not None:
            window.trim(now - self.window_s)
        return window

    def record_worker(self, sample: WorkerSample, now: float | None = None) -> None:
        """Fold one worker report into its service's window."""
        now = time.time() if now is None else now
        window = self._window(sample.service, now)
        window.waits.add(now, sample.queue_wait_s)
        window.processing.add(now, sample.process_s)
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
        self._window(sample.service, now).transfer.add(now, sample.transfer_s)

    def record_proxy(self, sample: ProxySample) -> None:
        """Remember the proxy's backlog (in flight plus waiting for a worker)."""
        window = self._window(sample.service)
        window.pending[f"proxy:{sample.proxy}"] = sample.waiting

    def held(self) -> int:
        """The latency values held, all services together: what the monitor's memory grows
        with (bounded by the window and SLICE_CAP)."""
        return sum(len(w.waits) + len(w.processing) + len(w.transfer)
                   for w in self._services.values())

    def summaries(self, now: float | None = None) -> dict[str, ServiceSummary]:
        """Per-service summaries over the `window_s` seconds up to `now` (default: the present).

        A past `now` (the last training step, once the services have stopped) judges health
        at that moment; reports recorded after it still count, since a report describes work
        already done.
        """
        now = time.time() if now is None else now
        return {name: self._summary(name, window, now) for name, window in self._services.items()}

    def _summary(self, name: str, window: _ServiceWindow, now: float) -> ServiceSummary:
        window.trim(now - self.window_s)
        span = max(now - window.served[0][0], 1.0) if window.served else 1.0
        # A worker whose last report came after `now` was alive at `now`.
        healthy = sum(1 for t in window.seen.values() if now - t <= self.stale_after_s)
        none: list[float | None] = [None, None]  # no value in the window
        waits, processing, transfer = (series.percentiles_ms((50, 99)) or none for series in
                                       (window.waits, window.processing, window.transfer))
        return ServiceSummary(
            service=name,
            throughput_rps=sum(n for _, n in window.served) / span,
            queue_wait_ms_p50=waits[0],
            queue_wait_ms_p99=waits[1],
            process_ms_p50=processing[0],
            process_ms_p99=processing[1],
            transfer_ms_p50=transfer[0],
            transfer_ms_p99=transfer[1],
            pending=sum(window.pending.values()),
            workers_healthy=healthy,
            workers_known=len(window.seen),
            restarts=window.restarts,
            errors=window.errors,
        )


# The reports a second one FleetMonitor takes with room to spare. The actor is one Python
# thread, and Ray's own work for one actor call is 0.2-0.5 ms of it whatever the call does
# (benchmarks/fleet/monitor.py): 10,000 ranks reporting every second would need 2-5 cores.
MONITOR_REPORTS_PER_S = 1_000


def report_interval(configured_s: float, reporters: int) -> float:
    """Seconds between one reporter's reports (e.g. each rank's AuxClient), so that
    `reporters` of them send the monitor at most MONITOR_REPORTS_PER_S: the configured
    interval, stretched in a large fleet (10 s at 10,000 ranks, still three reports a window)."""
    return max(configured_s, reporters / MONITOR_REPORTS_PER_S)


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
