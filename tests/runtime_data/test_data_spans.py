"""Where each batch sits in the global stream (`Span`, the sample ledger's record): the
schedule's spans name exactly the samples it yields, and the pipeline's `last_span` names the
batch it returned, on the first-batch path and the stages' path, across epoch ends, with
other producer and collator counts, after a resume and with a producers' `source`."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline
from runtime.data.schedule import GlobalSchedule, SamplerState, Span
from runtime.data.sources import LocalSource

EPOCH = 53  # samples per epoch: 4 global batches of 12, a 5-sample tail dropped


def _schedule() -> GlobalSchedule:
    return GlobalSchedule([EPOCH], [1.0], seed=7, shuffle=True)


def _at(span: Span) -> np.ndarray:
    """The sample indices at a span's global indices, read off the epoch's global order."""
    epoch, offset = divmod(span.start, span.epoch_size)
    return _schedule().epoch_order(epoch)[1][offset:offset + span.count]


@settings(deadline=None, max_examples=40)
@given(world=st.integers(1, 4), batch=st.integers(1, 6), epoch=st.integers(0, 3),
       offset=st.integers(0, EPOCH))
def test_the_schedules_spans_name_its_samples_and_tile_the_stream(
        world: int, batch: int, epoch: int, offset: int) -> None:
    schedule, state = _schedule(), SamplerState(epoch, offset)
    streams = [schedule.rank_batches(state, world_size=world, rank=r, batch_size=batch)
               for r in range(world)]
    previous: Span | None = None
    for _ in range(2 * EPOCH // (world * batch) + 2):  # past two epoch ends
        rows = [next(stream) for stream in streams]
        spans = [row.span for row in rows]
        assert [s.start for s in spans] == [spans[0].batch_start + r * batch
                                            for r in range(world)]
        assert {(s.batch_count, s.slots, s.count) for s in spans} == {(world * batch, world,
                                                                       batch)}
        for row in rows:
            assert row.indices.tolist() == _at(row.span).tolist()
        if previous is not None:  # the next global batch, or the next epoch's first
            end = previous.batch_start + previous.batch_count
            next_epoch = (end // EPOCH + 1) * EPOCH
            assert spans[0].batch_start == end or (
                spans[0].batch_start == next_epoch and next_epoch - end < world * batch)
        previous = spans[0]


def _config(**kw: object) -> DataConfig:
    base: dict = {
        "datasets": [{"name": "a", "_target_": "runtime.data.synthetic.SyntheticImages",
                      "length": EPOCH, "size": 4}],
        "batch_size": 6, "seed": 7, "chunk_size": 4, "start_method": "fork", "timeout_s": 60,
    }
    return DataConfig(**{**base, **kw})


def _read(pipe: DataPipeline, n: int) -> list[Span]:
    """n batches' spans, each checked against the samples the batch holds."""
    spans = []
    for _ in range(n):
        batch = next(pipe)
        assert pipe.last_span is not None
        assert batch["index"].tolist() == _at(pipe.last_span).tolist()
        spans.append(pipe.last_span)
    return spans


def _expected(state: SamplerState, n: int) -> list[Span]:
    batches = _schedule().rank_batches(state, world_size=2, rank=1, batch_size=6)
    return [batch.span for batch in itertools.islice(batches, n)]


def test_a_pipeline_names_each_batch_on_both_paths_and_after_a_resume() -> None:
    with DataPipeline(_config(), rank=1, world_size=2) as pipe:
        assert pipe.last_span is None
        head = _read(pipe, 6)  # the first batch in the rank, then the stages, past an epoch end
        state = pipe.state_dict()
    assert head == _expected(SamplerState(), 6)
    assert head[4].batch_start == EPOCH  # the tail of 5 was dropped
    shape = {"producers": 2, "collators": 2}
    with DataPipeline(_config(**shape), rank=1, world_size=2, state=state) as pipe:
        tail = _read(pipe, 5)
    assert tail == _expected(SamplerState.from_dict(state), 5)
    assert tail[0].batch_start == head[-1].batch_start + 12


@pytest.mark.parametrize("producers", [1, 3])
def test_a_pipeline_fed_by_a_source_names_each_batch(producers: int) -> None:
    config = _config(producers=producers, collators=2)
    source = functools.partial(LocalSource, config)  # as an auxiliary producer feeds it
    with DataPipeline(config, rank=1, world_size=2, state={"epoch": 1, "offset": 45},
                      source=source) as pipe:
        spans = _read(pipe, 3)
    assert spans == _expected(SamplerState(1, 45), 3)
    assert spans[0].batch_start == 2 * EPOCH  # 45 + 12 > 53: the next epoch


def test_a_load_state_dict_moves_the_spans_with_it() -> None:
    with DataPipeline(_config(), rank=1, world_size=2) as pipe:
        _read(pipe, 2)
        pipe.load_state_dict({"epoch": 0, "offset": 12})
        assert _read(pipe, 1) == _expected(SamplerState(0, 12), 1)
