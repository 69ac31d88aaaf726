"""Checkpoints in one process: staging, commit markers, retention, crash safety, loader state."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer
from runtime.checkpoint.storage import CheckpointError, CheckpointStore
from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline


def _ckpt(tmp_path: Path, **kw: object) -> Checkpointer:
    return Checkpointer(CheckpointConfig(uri=str(tmp_path / "ckpt"), interval_steps=1, **kw))


def test_async_save_snapshots_the_state_before_training_moves_on(tmp_path: Path) -> None:
    ckpt = _ckpt(tmp_path)
    weights = torch.arange(4096, dtype=torch.float32)
    ckpt.save(1, {"w": weights})
    weights.add_(1000.0)  # the next optimizer step, while the writer is still busy
    ckpt.wait()
    restored = {"w": torch.zeros(4096)}
    assert ckpt.load(restored) == 1
    assert torch.equal(restored["w"], torch.arange(4096, dtype=torch.float32))


@pytest.mark.parametrize("async_save", [True, False])
def test_retention_keeps_the_newest_committed_steps(tmp_path: Path, async_save: bool) -> None:
    ckpt = _ckpt(tmp_path, keep_last=2, async_save=async_save)
    for step in range(1, 6):
        ckpt.save(step, {"w": torch.full((8,), float(step))})
    ckpt.close()
    assert ckpt.store.steps() == {4: True, 5: True}


def test_maybe_save_follows_the_interval_and_the_replica_group(tmp_path: Path) -> None:
    config = CheckpointConfig(uri=str(tmp_path), interval_steps=3)
    assert [s for s in range(1, 10) if Checkpointer(config).due(s)] == [3, 6, 9]
    assert not Checkpointer(config, replica_group=1).maybe_save(3, {"w": torch.ones(1)})


def test_an_uncommitted_directory_is_invisible_and_pruned(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    for step in (1, 2, 3):
        (tmp_path / f"step-{step:010d}").mkdir()
    store.commit(1, {})
    store.commit(3, {})
    assert store.latest() == 3
    assert store.prune(keep_last=5) == [2]
    with pytest.raises(CheckpointError, match=r"resume_from.*no COMMITTED marker"):
        store.resolve(str(tmp_path / "step-0000000002"))


def test_fresh_start_when_nothing_is_committed(tmp_path: Path) -> None:
    assert _ckpt(tmp_path).load({"w": torch.zeros(1)}) is None
    assert _ckpt(tmp_path, resume_from=None).load({"w": torch.zeros(1)}) is None


def test_fsspec_url_storage_round_trips(tmp_path: Path) -> None:
    ckpt = Checkpointer(CheckpointConfig(uri=f"file://{tmp_path}/remote", interval_steps=1))
    assert ckpt.store.remote
    ckpt.save(7, {"w": torch.ones(3)})
    ckpt.close()
    got = {"w": torch.zeros(3)}
    assert ckpt.load(got) == 7 and torch.equal(got["w"], torch.ones(3))


class _Hook:
    name = "replay-buffer"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def save(self, step: int, uri: str) -> None:
        self.calls.append(("save", step, uri))

    def load(self, step: int, uri: str) -> None:
        self.calls.append(("load", step, uri))


def test_aux_hooks_are_called_with_their_place_in_the_checkpoint(tmp_path: Path) -> None:
    hook = _Hook()
    ckpt = Checkpointer(CheckpointConfig(uri=str(tmp_path), interval_steps=1), hooks=[hook])
    ckpt.save(2, {"w": torch.ones(1)})
    ckpt.close()
    ckpt.load({"w": torch.zeros(1)})
    where = f"{tmp_path}/step-0000000002/aux/replay-buffer"
    assert hook.calls == [("save", 2, where), ("load", 2, where)]


def test_loader_progress_travels_in_the_checkpoint(tmp_path: Path) -> None:
    config = DataConfig(
        datasets=[{"name": "t", "_target_": "runtime.data.synthetic.SyntheticTokens"}],
        batch_size=4,
        start_method="fork",
    )
    ckpt = _ckpt(tmp_path)
    with DataPipeline(config) as pipe:
        for _ in range(3):
            next(pipe)
        ckpt.save(3, {"loader": pipe})
        want = next(pipe)["index"]
    ckpt.close()
    with DataPipeline(config) as resumed:
        ckpt.load({"loader": resumed})
        assert torch.equal(next(resumed)["index"], want)


@pytest.mark.slow
def test_a_writer_killed_mid_checkpoint_leaves_the_previous_one_latest(tmp_path: Path) -> None:
    uri, log = str(tmp_path / "ckpt"), tmp_path / "child.log"
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_writer_child.py")), uri],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    try:
        assert child.stdout is not None
        lines = {child.stdout.readline().strip() for _ in range(2)}
        assert lines == {"staged", "writing"}, log.read_text()
    finally:
        child.kill()
        child.wait()
    store = CheckpointStore(uri)
    assert store.steps() == {1: True, 2: False}
    assert store.latest() == 1
    restored = {"w": torch.zeros(1024, 256)}
    assert _ckpt(tmp_path).load(restored) == 1
    assert torch.equal(restored["w"], torch.full((1024, 256), 1.0))
