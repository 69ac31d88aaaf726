"""The train loop's checkpoint manager and the driver's checkpoint decisions, in one process
with the real Checkpointer (DCP) and the real loader pipeline as the batch source."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ray.train import WorkerGroupError

from runtime.checkpoint.storage import CheckpointError, CheckpointStore
from runtime.checkpoint.training import TrainState
from runtime.run.batches import build_batches
from runtime.run.checkpointing import CheckpointManager, find_resume_point, localize
from runtime.run.config import TrainConfig, build_config
from runtime.train.driver import describe_failure


def _config(uri: str, **checkpoint: object) -> TrainConfig:
    section = {"uri": uri, "interval_steps": 2, **checkpoint}
    return build_config({"data": DATA, "checkpoint": section})


DATA = {"datasets": [{"name": "features", "_target_": "runtime.data.synthetic.SyntheticFeatures",
                      "length": 64, "dim": 3}],
        "batch_size": 4, "producers": 1, "start_method": "fork"}


def _state(config: TrainConfig) -> TrainState:
    model = torch.nn.Linear(3, 1)
    return TrainState(model, torch.optim.Adam(model.parameters()), build_batches(config, 0))


def _train(state: TrainState, steps: range, manager: CheckpointManager) -> list[float]:
    losses = []
    for step in steps:
        loss = state.model(next(state.loader)["input"]).pow(2).mean()
        state.optimizer.zero_grad()
        loss.backward()
        state.optimizer.step()
        losses.append(loss.item())
        manager.after_step(step)
    return losses


def test_a_resumed_manager_continues_like_the_uninterrupted_run(tmp_path: Path) -> None:
    config = _config(str(tmp_path))
    torch.manual_seed(0)
    state = _state(config)
    with CheckpointManager(config.checkpoint, state) as manager:
        _train(state, range(1, 4), manager)  # commits step 2; step 3 is lost
        reference = _train(state, range(4, 6), manager)
    point = find_resume_point(config)
    assert point is not None and point.step == 4
    explicit = _config(str(tmp_path), resume_from=f"{tmp_path}/step-0000000002")
    fresh = _state(config)  # other initial weights, empty optimizer, batch stream at 0
    with CheckpointManager(config.checkpoint, fresh) as manager:
        assert manager.resume(find_resume_point(explicit)) == 2
        _train(fresh, range(3, 4), manager)
        assert _train(fresh, range(4, 6), manager) == reference


def test_a_disabled_manager_writes_nothing(tmp_path: Path) -> None:
    config = _config(str(tmp_path / "ckpt"), enabled=False)
    state = _state(config)
    with CheckpointManager(config.checkpoint, state) as manager:
        _train(state, range(1, 5), manager)
        assert manager.resume(find_resume_point(config)) == 0
    assert not (tmp_path / "ckpt").exists()


def test_a_failed_background_write_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    config = _config(str(tmp_path / "file" / "ckpt"))
    state = _state(config)
    manager = CheckpointManager(config.checkpoint, state)
    _train(state, range(1, 3), manager)
    with pytest.raises(CheckpointError, match=r"file/ckpt failed: rank 0: NotADirectoryError"):
        manager.close()


def test_relative_paths_become_absolute_for_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = localize(_config("runs/a", resume_from="runs/a/step-0000000004"))
    assert config.checkpoint is not None
    assert config.checkpoint.uri == f"{tmp_path}/runs/a"
    assert config.checkpoint.resume_from == f"{tmp_path}/runs/a/step-0000000004"
    assert localize(_config("gs://bucket/a")).checkpoint.uri == "gs://bucket/a"


def test_resume_point_is_the_latest_commit_or_an_explicit_committed_one(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    for step in (2, 4):
        store.commit(step, {})
    (tmp_path / "step-0000000006").mkdir()  # a write that never finished
    assert find_resume_point(_config(str(tmp_path))).step == 4
    assert find_resume_point(_config(str(tmp_path), resume_from=None)) is None
    with pytest.raises(CheckpointError, match="no COMMITTED marker"):
        find_resume_point(_config(str(tmp_path), resume_from=f"{tmp_path}/step-0000000006"))


def test_a_rank_failure_is_reported_by_its_own_message() -> None:
    error = WorkerGroupError("long Ray text", {1: CheckpointError("disk full")})
    assert describe_failure(error) == "rank 1: disk full"
    assert "long Ray text" in describe_failure(WorkerGroupError("long Ray text", {0: OSError()}))
