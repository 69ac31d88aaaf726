"""DiLoCo's parts in one process: the synchroniser on a thread (real ZeroMQ over loopback
TCP), the learner hook, the outer optimizer, its checkpoints, and the settings."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from runtime.diloco.config import (
    DilocoConfig,
    OuterOptimizer,
    SynchroniserConfig,
    learner_shard,
    with_deployment,
)
from runtime.diloco.errors import DilocoError
from runtime.diloco.learner import DilocoLearner, NoLearner, learner_for
from runtime.diloco.link import Merged
from runtime.diloco.outer import OuterState, OuterStore
from runtime.diloco.synchroniser import Synchroniser
from runtime.identity import Env


@contextmanager
def serving(**settings: object) -> Iterator[tuple[Synchroniser, str]]:
    synchroniser = Synchroniser(SynchroniserConfig.model_validate(
        {"bind": "tcp://127.0.0.1:*", "round_timeout_s": 30, "plaintext": True, **settings}))
    address = synchroniser.bind()
    thread = threading.Thread(target=synchroniser.serve, daemon=True)
    thread.start()
    yield synchroniser, address
    thread.join(60)
    assert not thread.is_alive()


def _learner(address: str, name: str = "a", **settings: object) -> DilocoLearner:
    config = DilocoConfig.model_validate({"enabled": True, "endpoint": address, "learner": name,
                                          "inner_steps": 1, "timeout_s": 60, "round_timeout_s": 30,
                                          "plaintext": True, **settings})
    return DilocoLearner(config, torch.nn.Linear(3, 2), rank=0)


def _weights(learner: DilocoLearner) -> torch.Tensor:
    return learner._flat().clone()


def test_a_merge_is_the_outer_sgd_step_on_the_mean_pseudo_gradient() -> None:
    outer = OuterOptimizer(lr=0.5, momentum=0.0, nesterov=False)
    with serving(learners=("a",), outer=outer.model_dump()) as (_, address):
        learner = _learner(address)
        learner.join()
        start = _weights(learner)
        with torch.no_grad():
            learner.params[0].add_(1.0)  # an "inner step"
        moved = _weights(learner)
        learner.after_step(1)
        learner.close()
    # shared - lr * (shared - snapshot), with the one snapshot as the mean
    torch.testing.assert_close(_weights(learner), start - 0.5 * (start - moved))
    assert learner.round == 1 and learner.records[0].merged


def test_decoupled_rules_meet_weights_that_moved_on() -> None:
    snapshot, now, shared = torch.zeros(8), torch.full((8,), 2.0), torch.full((8,), 0.5)
    for merge, expected in (("delta", now + shared - snapshot), ("replace", shared)):
        learner = _learner("tcp://127.0.0.1:9", mode="decoupled", merge=merge)
        learner._assign(now)
        learner.snapshot = snapshot
        learner._apply(Merged(3, shared, rejoined=False, received=0))
        torch.testing.assert_close(_weights(learner), expected)
        assert learner.round == 3
        learner.link.close()  # type: ignore[union-attr]


def test_the_outer_state_is_checkpointed_and_a_new_synchroniser_resumes_it(
        tmp_path: Path) -> None:
    with serving(learners=("a",), checkpoint=str(tmp_path)) as (_, address):
        learner = _learner(address)
        learner.join()
        for step in (1, 2):
            with torch.no_grad():
                learner.params[0].add_(0.1)
            learner.after_step(step)
        learner.close()
    merged = _weights(learner)
    restored = OuterState(OuterOptimizer())
    assert OuterStore(str(tmp_path), keep_last=2).restore(restored)
    assert restored.round == 2
    torch.testing.assert_close(restored.weights, merged)
    with serving(learners=("a",), checkpoint=str(tmp_path)) as (synchroniser, address):
        assert synchroniser.state.round == 2
        again = _learner(address)
        again.join()  # a learner joining later starts from the saved shared weights
        again.close()
    torch.testing.assert_close(_weights(again), merged)
    assert again.round == 2


def test_an_unknown_learner_is_refused() -> None:
    with serving(learners=("a",)) as (_, address):
        stranger = _learner(address, name="z")
        with pytest.raises(DilocoError, match="'z' is not a learner of diloco: a"):
            stranger.join()
        stranger.link.close()  # type: ignore[union-attr]
        _learner(address).close()  # a's leave ends the synchroniser


def test_a_disabled_section_is_a_no_op() -> None:
    assert isinstance(learner_for(DilocoConfig(), torch.nn.Linear(1, 1), 0), NoLearner)
    assert learner_shard(DilocoConfig(), 3, 4) == (3, 4)
    learner = DilocoConfig(enabled=True, endpoint="tcp://h:1", index=1, learners=3,
                           plaintext=True)
    assert learner_shard(learner, 3, 4) == (7, 12)


def test_settings_are_checked_when_built() -> None:
    with pytest.raises(ValidationError, match="needs endpoint"):
        DilocoConfig(enabled=True)
    with pytest.raises(ValidationError, match="must exceed round_timeout_s"):
        DilocoConfig(round_timeout_s=60, timeout_s=30)
    with pytest.raises(ValidationError, match="nesterov needs momentum"):
        OuterOptimizer(momentum=0)


def test_the_deployment_makes_a_learner_with_its_own_checkpoints() -> None:
    raw = {"diloco": {"enabled": False, "inner_steps": 7}, "checkpoint": {"uri": "gs://b/run"}}
    document = '{"endpoint": "tcp://sync:5555", "learner": "eu", "index": 1, "learners": 2}'
    merged = with_deployment(raw, {Env.DILOCO: document})
    assert merged["diloco"] == {"enabled": True, "inner_steps": 7, "endpoint": "tcp://sync:5555",
                                "learner": "eu", "index": 1, "learners": 2}
    assert merged["checkpoint"]["uri"] == "gs://b/run/learners/eu"
    assert with_deployment(raw, {}) == raw


def test_a_message_that_is_no_request_is_dropped_and_serving_goes_on() -> None:
    import zmq

    with serving(learners=("a",)) as (synchroniser, address):
        stray = zmq.Context.instance().socket(zmq.DEALER)
        stray.connect(address)
        stray.send(b"\x00" * 7)  # shorter than a request's head
        learner = _learner(address)
        learner.join()
        learner.close()
        stray.close(linger=0)
    assert synchroniser.state.round == 0 and synchroniser.left == {"a"}
