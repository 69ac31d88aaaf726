"""Which slot of the global sample stream each rank reads (runtime.run.batches.data_slot)."""

from __future__ import annotations

from runtime.run.batches import data_slot
from runtime.run.config import build_config

DATA = {"datasets": [{"name": "f", "_target_": "runtime.data.synthetic.SyntheticFeatures"}],
        "batch_size": 2}


def test_the_ranks_of_a_tensor_parallel_group_read_one_slot() -> None:
    config = build_config({"data": DATA, "layout": {"tp": 2}})
    assert [data_slot(config, rank, 8) for rank in range(8)] == [
        (0, 4), (0, 4), (1, 4), (1, 4), (2, 4), (2, 4), (3, 4), (3, 4)]


def test_without_tensor_parallelism_every_rank_has_its_own_slot() -> None:
    config = build_config({"data": DATA})
    assert [data_slot(config, rank, 3) for rank in range(3)] == [(0, 3), (1, 3), (2, 3)]
