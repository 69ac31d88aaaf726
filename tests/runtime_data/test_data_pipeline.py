"""The real multi-process pipeline: exact resume, crash reports, clean shutdown.

Stage processes start with `fork` so that the crashing datasets defined here are
importable in them; one test uses `forkserver`, the default, with library datasets.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal

import pytest
import torch

from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline, DataPipelineError
from runtime.data.synthetic import SyntheticImages
from runtime.errors import ConfigError

_IMAGES = "runtime.data.synthetic.SyntheticImages"


class RaisesAt(SyntheticImages):
    """Raises a ValueError when sample `bad` is read."""

    def __init__(self, bad: int, **kw: int) -> None:
        super().__init__(**kw)
        self.bad = bad

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index == self.bad:
            raise ValueError(f"corrupt record {index}")
        return super().__getitem__(index)


class KilledAt(SyntheticImages):
    """The reading process dies by SIGKILL on sample `bad`, as in an out-of-memory kill."""

    def __init__(self, bad: int, **kw: int) -> None:
        super().__init__(**kw)
        self.bad = bad

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if index == self.bad:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(index)


def _config(**kw: object) -> DataConfig:
    base: dict = {
        "datasets": [
            {"name": "a", "_target_": _IMAGES, "length": 40, "size": 8},
            {"name": "b", "_target_": _IMAGES, "length": 13, "size": 8, "weight": 0.5},
        ],
        "batch_size": 6,
        "transform": {"_target_": "runtime.data.synthetic.augment"},
        "seed": 11,
        "chunk_size": 4,
        "start_method": "fork",
        "timeout_s": 60,
    }
    return DataConfig(**{**base, **kw})


def _take(pipe: DataPipeline, n: int) -> list[dict[str, torch.Tensor]]:
    return [next(pipe) for _ in range(n)]


def _same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x["index"], y["index"]) and torch.equal(x["image"], y["image"])
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.slow
def test_resume_at_random_steps_yields_the_uninterrupted_stream() -> None:
    total = 24  # crosses epoch boundaries (53 samples per epoch, 12 per global batch)
    with DataPipeline(_config(), rank=1, world_size=2) as pipe:
        reference = _take(pipe, total)
    rng = random.Random(20261130)
    for _ in range(3):
        cut = rng.randrange(1, total)
        with DataPipeline(_config(), rank=1, world_size=2) as pipe:
            head = _take(pipe, cut)
            state = pipe.state_dict()
        # The resumed loader has other producer and collator counts on purpose.
        shape = {"producers": rng.randint(1, 3), "collators": rng.randint(1, 2)}
        with DataPipeline(_config(**shape), rank=1, world_size=2, state=state) as pipe:
            tail = _take(pipe, total - cut)
        assert _same(head + tail, reference), f"cut at {cut} with {shape}"


def test_load_state_dict_restarts_a_running_pipeline_at_that_state() -> None:
    with DataPipeline(_config()) as pipe:
        first = _take(pipe, 3)
        pipe.load_state_dict({"epoch": 0, "offset": 6})
        again = _take(pipe, 2)
    assert _same(first[1:], again)


def test_batches_follow_the_schedule_and_ranks_do_not_overlap() -> None:
    seen = []
    for rank in range(2):
        with DataPipeline(_config(shuffle=False, transform=None), rank=rank, world_size=2) as p:
            seen.append(next(p))
    assert seen[0]["index"].tolist() == [0, 1, 2, 3, 4, 5]
    assert seen[1]["index"].tolist() == [6, 7, 8, 9, 10, 11]


def test_a_producer_that_raises_is_reported_with_its_error() -> None:
    bad = {"name": "a", "_target_": f"{__name__}.RaisesAt", "bad": 9, "length": 40}
    pipe = DataPipeline(_config(datasets=[bad], shuffle=False))  # batch 1 reads 6..11
    with pytest.raises(DataPipelineError, match=r"producer-\d failed: ValueError: corrupt record"):
        _take(pipe, 4)


def test_a_first_batch_that_fails_in_the_rank_is_reported_with_its_error() -> None:
    bad = {"name": "a", "_target_": f"{__name__}.RaisesAt", "bad": 3, "length": 40}
    pipe = DataPipeline(_config(datasets=[bad], shuffle=False))
    with pytest.raises(DataPipelineError, match=r"first-batch \(in the rank\) failed: "
                                                r"ValueError: corrupt record 3"):
        next(pipe)
    assert mp.active_children() == []  # no stage started for it


def test_the_first_batch_made_in_the_rank_leaves_its_random_state_alone() -> None:
    """The rank makes the first batch with per-sample seeds; its own RNGs go on as before."""
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with DataPipeline(_config()) as pipe:
        next(pipe)
        assert torch.equal(torch.rand(3), expected)


def test_a_producer_killed_by_a_signal_is_reported_not_hung() -> None:
    bad = {"name": "a", "_target_": f"{__name__}.KilledAt", "bad": 7, "length": 40}
    pipe = DataPipeline(_config(datasets=[bad], shuffle=False))
    with pytest.raises(DataPipelineError, match=r"producer-\d exited with code -9"):
        _take(pipe, 4)
    assert mp.active_children() == []


def test_close_stops_every_stage_and_frees_shared_memory() -> None:
    pipe = DataPipeline(_config(producers=3, collators=2))
    _take(pipe, 2)
    before = set(os.listdir("/dev/shm"))
    pipe.close()
    pipe.close()
    assert mp.active_children() == []
    assert len(before - set(os.listdir("/dev/shm"))) == 2


def test_a_batch_larger_than_a_slot_names_the_setting() -> None:
    pipe = DataPipeline(_config(slot_mb=0.001))
    with pytest.raises(DataPipelineError, match="slot_mb"):
        next(pipe)


def test_an_unimportable_target_names_the_field() -> None:
    bad = {"name": "a", "_target_": "no_such_module.Thing"}
    with pytest.raises(ConfigError, match=r"data\.datasets\[0\]\._target_"):
        DataPipeline(_config(datasets=[bad]))


@pytest.mark.slow
def test_forkserver_stages_give_the_same_batches_as_fork() -> None:
    with DataPipeline(_config(start_method="forkserver")) as pipe:
        served = _take(pipe, 3)
    with DataPipeline(_config()) as pipe:
        forked = _take(pipe, 3)
    assert _same(served, forked)
