"""The progress record the driver prints: events from rank 0, read in order by a follower
thread while `fit` runs (a real Ray actor)."""

from __future__ import annotations

import ray

from runtime.fleet import FleetState, WorkerSample
from runtime.run.progress import (
    CheckpointEvent,
    FleetEvent,
    ProgressRecorder,
    StepEvent,
    printing,
    start_progress,
)
from testing.wait import wait_until


def test_events_read_as_one_line_each() -> None:
    assert StepEvent(10, 60, 0.29307, at=1.0, rate=3713.2).line() == (
        "step 10/60  loss 0.29307  3,713 samples/s"
    )
    lm = StepEvent(20, 60, 2.91847, at=2.0, rate=2031.4, unit="tokens", loss_unit="nats/token",
                   metrics={"bits/byte": 4.21071})
    assert lm.line() == "step 20/60  loss 2.91847 nats/token  4.2107 bits/byte  2,031 tokens/s"
    assert CheckpointEvent(20, background=True).line() == (
        "step 20: checkpoint staged, committing in the background"
    )
    assert CheckpointEvent(20, background=False).line() == "step 20: checkpoint committed"
    state = FleetState()
    state.record_worker(WorkerSample("enc", "w0", "a", 1, 0, 0, [0.001], [0.002]), now=1.0)
    line = FleetEvent(30, state.summaries(now=1.0)).line()
    assert line.startswith("fleet step 30: enc: 1.0 req/s, queue wait p50/p99 1.00/1.00 ms")


def test_the_driver_prints_what_rank_0_records_in_order(local_ray: None) -> None:
    actor = start_progress("progresstest")
    lines: list[str] = []
    with printing(actor, lines.append, every_s=0.05):
        recorder = ProgressRecorder("progresstest", steps=4, unit="tokens",
                                    loss_unit="nats/token")
        recorder.step(3, 0.5, done=256, metrics={"bits/byte": 0.72})
        # an upper bound: an actor starts slowly under load
        wait_until(lambda: lines, 120, "the first progress line")
        # while the body runs
        assert lines[0].startswith("step 3/4  loss 0.50000 nats/token  0.7200 bits/byte")
        assert lines[0].endswith(" tokens/s")
        recorder.checkpoint(3, background=False)
        recorder.step(4, 0.25, done=256, metrics={})
        recorder.flush()
    assert [line.split("  ")[0] for line in lines] == [
        "step 3/4", "step 3: checkpoint committed", "step 4/4"
    ]
    assert ray.get(actor.history.remote()) == {3: 0.5, 4: 0.25}
    assert ray.get(actor.last_step_at.remote()) is not None
    ray.kill(actor)
