"""The global schedule: rank slices partition it, weights apportion it, progress resumes it."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from runtime.data.schedule import GlobalSchedule, SamplerState, apportion


def _schedule(**kw: object) -> GlobalSchedule:
    args: dict = {"lengths": [37, 11], "weights": [3.0, 1.0], "seed": 5, "shuffle": True}
    return GlobalSchedule(**{**args, **kw})


def _global_stream(
    schedule: GlobalSchedule, state: SamplerState, world: int, batch: int, n: int
) -> list[tuple[int, int]]:
    """The samples of n global batches, rank slices concatenated in rank order."""
    its = [
        schedule.rank_batches(state, world_size=world, rank=r, batch_size=batch)
        for r in range(world)
    ]
    out: list[tuple[int, int]] = []
    for _ in range(n):
        for it in its:
            b = next(it)
            out.extend(zip(b.datasets.tolist(), b.indices.tolist(), strict=True))
    return out


@given(st.integers(1, 10_000), st.lists(st.floats(0.01, 100), min_size=1, max_size=6))
def test_apportion_sums_to_total_and_follows_weights(total: int, weights: list[float]) -> None:
    counts = apportion(total, weights)
    assert sum(counts) == total
    exact = np.asarray(weights) / sum(weights) * total
    assert np.all(np.abs(np.asarray(counts) - exact) < 1.0)


def test_rank_slices_partition_the_global_order() -> None:
    s = _schedule()
    ds, idx = s.epoch_order(0)
    stream = _global_stream(s, SamplerState(), world=4, batch=3, n=4)
    assert stream == list(zip(ds[:48].tolist(), idx[:48].tolist(), strict=True))


def test_weights_set_each_datasets_share_of_an_epoch() -> None:
    s = _schedule()
    ds, _ = s.epoch_order(2)
    assert np.bincount(ds).tolist() == [36, 12]


def test_oversampled_dataset_cycles_through_all_samples_before_repeating() -> None:
    s = _schedule(weights=[1.0, 1.0])  # 24 of the 11-sample set per epoch
    ds, idx = s.epoch_order(0)
    copies = np.bincount(idx[ds == 1], minlength=11)
    assert set(copies.tolist()) == {2, 3}


def test_same_inputs_give_the_same_schedule_and_a_new_seed_another() -> None:
    a, b = _schedule().epoch_order(1), _schedule().epoch_order(1)
    assert np.array_equal(a[1], b[1])
    assert not np.array_equal(a[1], _schedule(seed=6).epoch_order(1)[1])


def test_resuming_from_after_continues_the_stream_across_epochs() -> None:
    s = _schedule()
    full = list(
        itertools.islice(s.rank_batches(SamplerState(), world_size=2, rank=1, batch_size=4), 15)
    )
    resumed = s.rank_batches(full[6].after, world_size=2, rank=1, batch_size=4)
    for want, got in zip(full[7:], resumed, strict=False):
        assert np.array_equal(want.indices, got.indices)
        assert np.array_equal(want.seeds, got.seeds)
    assert {b.after.epoch for b in full} >= {0, 1, 2}


def test_world_size_change_continues_the_same_global_stream() -> None:
    s = _schedule()
    before = _global_stream(s, SamplerState(), world=4, batch=2, n=2)  # 16 samples
    state = SamplerState(0, 16)
    after = _global_stream(s, state, world=2, batch=2, n=3)  # 12 more samples
    assert before + after == _global_stream(s, SamplerState(), world=1, batch=4, n=7)


def test_unshuffled_single_dataset_reads_in_order() -> None:
    s = GlobalSchedule([10], [1.0], seed=0, shuffle=False)
    b = next(s.rank_batches(SamplerState(), world_size=2, rank=1, batch_size=3))
    assert b.indices.tolist() == [3, 4, 5]
