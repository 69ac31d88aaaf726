"""Training progress as the driver sees it.

Rank 0 records what a researcher follows (step losses and throughput, checkpoints, fleet
summaries) as events in a small named actor; the driver prints them while `fit` runs. The
driver is thus the one place that speaks for the run, whether or not Ray forwards the
workers' own output (`logging.forward_worker_logs`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayError

from runtime.fleet import ServiceSummary

Printer = Callable[[str], None]


@dataclass(frozen=True)
class StepEvent:
    """A logged optimizer step: the loss averaged over ranks, what it means in the task's
    units (bits per byte, ...), and the pace since the last logged step over all ranks."""

    step: int
    steps: int
    loss: float
    at: float
    rate: float  # `unit`s per second
    unit: str = "samples"
    loss_unit: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)

    def line(self) -> str:
        """One progress line, e.g. `step 20/60  loss 2.91847 nats/token  4.2107 bits/byte
        2,031 tokens/s`."""
        loss = f"loss {self.loss:.5f}" + (f" {self.loss_unit}" if self.loss_unit else "")
        shown = "".join(f"  {value:.4f} {name}" for name, value in self.metrics.items())
        return f"step {self.step}/{self.steps}  {loss}{shown}  {self.rate:,.0f} {self.unit}/s"


@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint started after `step`."""

    step: int
    background: bool

    def line(self) -> str:
        """One line: staged (committing in the background) or written."""
        done = "staged, committing in the background" if self.background else "committed"
        return f"step {self.step}: checkpoint {done}"


@dataclass(frozen=True)
class FleetEvent:
    """The FleetMonitor's summaries taken after `step`."""

    step: int
    summaries: Mapping[str, ServiceSummary]

    def line(self) -> str:
        """One line per service."""
        return "\n".join(f"fleet step {self.step}: {s.line()}" for s in self.summaries.values())


@dataclass(frozen=True)
class Notice:
    """Something a researcher should see that is not a step: a worker group restarted from a
    checkpoint, a replica group dropped or healed, a shrink request."""

    text: str

    def line(self) -> str:
        """The notice as it is."""
        return self.text


Event = StepEvent | CheckpointEvent | FleetEvent | Notice


class RunProgress:
    """The run's events in order, appended by rank 0 and read by the driver."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def record(self, event: Event) -> None:
        """Append one event."""
        self.events.append(event)

    def since(self, cursor: int) -> list[Event]:
        """The events from index `cursor` on."""
        return self.events[cursor:]

    def history(self) -> dict[int, float]:
        """The loss of every logged step."""
        return {e.step: e.loss for e in self.events if isinstance(e, StepEvent)}

    def step_times(self) -> list[tuple[int, float]]:
        """Every logged step with when it finished, in the order recorded (a step that was
        trained again after a restart appears twice)."""
        return [(e.step, e.at) for e in self.events if isinstance(e, StepEvent)]

    def last_step_at(self) -> float | None:
        """When the last logged step finished (rank 0's clock); None before the first."""
        steps = [e.at for e in self.events if isinstance(e, StepEvent)]
        return steps[-1] if steps else None


def progress_name(run_id: str) -> str:
    """The named-actor name of a run's progress record."""
    return f"gkr-progress-{run_id}"


def start_progress(run_id: str) -> Any:
    """Start the progress actor (no CPU reserved)."""
    return ray.remote(num_cpus=0)(RunProgress).options(name=progress_name(run_id)).remote()


class ProgressRecorder:
    """Rank 0's side: turns steps, checkpoints and fleet summaries into events.

    Also a `FleetSink`, so that the FleetReporter's summaries reach the driver's output.
    """

    def __init__(self, run_id: str, steps: int, unit: str, loss_unit: str = "") -> None:
        """`unit`: what the task's throughput counts (tokens, samples); `loss_unit`: what
        its loss measures."""
        self.actor = ray.get_actor(progress_name(run_id))
        self.steps, self.unit, self.loss_unit = steps, unit, loss_unit
        self.since = time.time()
        self.pending: Any = None

    def step(self, step: int, loss: float, done: int, metrics: Mapping[str, float]) -> None:
        """A logged step; `done`: the units all ranks trained since the previous logged step
        (or the start), over the time since then."""
        now = time.time()
        rate = done / max(now - self.since, 1e-9)
        self.since = now
        self._record(StepEvent(step, self.steps, loss, now, rate, self.unit, self.loss_unit,
                               dict(metrics)))

    def checkpoint(self, step: int, background: bool) -> None:
        """A checkpoint was started after `step`."""
        self._record(CheckpointEvent(step, background))

    def notice(self, text: str) -> None:
        """A line for the researcher (see Notice)."""
        self._record(Notice(text))

    def emit(self, step: int, summaries: Mapping[str, ServiceSummary]) -> None:
        """FleetSink: the summaries taken after `step`."""
        self._record(FleetEvent(step, dict(summaries)))

    def flush(self) -> None:
        """Wait until every event is recorded (the driver reads them once `fit` returns)."""
        if self.pending is not None:
            ray.get(self.pending)

    def _record(self, event: Event) -> None:
        # One caller's calls to an actor run in submission order, so no wait is needed here.
        self.pending = self.actor.record.remote(event)


class _Follower:
    """Prints the events the progress actor has gained since the last look."""

    def __init__(self, actor: Any, echo: Printer) -> None:
        self.actor, self.echo, self.cursor = actor, echo, 0

    def drain(self) -> None:
        events = ray.get(self.actor.since.remote(self.cursor), timeout=30)
        self.cursor += len(events)
        for event in events:
            self.echo(event.line())

    def poll(self, stop: threading.Event, every_s: float) -> None:
        try:
            while not stop.wait(every_s):
                self.drain()
        except RayError:  # the actor is gone: the run is ending, and the driver says why
            return


@contextmanager
def printing(actor: Any, echo: Printer, every_s: float = 0.5) -> Iterator[None]:
    """Print the run's events while the body runs, then the ones recorded at its end."""
    follower, stop = _Follower(actor, echo), threading.Event()
    thread = threading.Thread(target=follower.poll, args=(stop, every_s), daemon=True,
                              name="gkr-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with suppress(RayError):  # an error already on its way out is the one to report
            follower.drain()
