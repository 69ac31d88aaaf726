"""Wire format, per-rank fair queues and weighted round-robin of the remote-call layer."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
import zmq

from runtime.aux.client import WeightedRoundRobin
from runtime.aux.fairqueue import FairQueues
from runtime.aux.wire import decode, encode


def test_round_trip_keeps_arrays_tensors_and_plain_values() -> None:
    payload = {
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "t": torch.ones(2, 5, dtype=torch.int64),
        "empty": np.zeros((0, 3)),
        "label": "cat",
        "k": 3,
    }
    header, out = decode(encode({"id": 7}, payload))
    assert header["id"] == 7
    np.testing.assert_array_equal(out["x"], payload["x"])
    assert isinstance(out["t"], torch.Tensor) and torch.equal(out["t"], payload["t"])
    assert out["empty"].shape == (0, 3)
    assert (out["label"], out["k"]) == ("cat", 3)


def test_arrays_are_views_of_the_received_frames() -> None:
    """Over a real socket pair: the decoded array maps the ZeroMQ frame, no copy."""
    context = zmq.Context.instance()
    server, client = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        big = np.random.default_rng(0).random(1 << 16)
        client.send_multipart(encode({"id": 1}, {"x": big}), copy=False)
        frames = server.recv_multipart(copy=False)
        _, out = decode(frames)
        assert np.shares_memory(out["x"], np.frombuffer(frames[1].buffer, dtype=np.uint8))
        np.testing.assert_array_equal(out["x"], big)
    finally:
        server.close()
        client.close()


def test_fair_queues_rotate_between_ranks() -> None:
    queues: FairQueues[str] = FairQueues(capacity=10)
    for i in range(5):
        queues.offer(0, f"a{i}")
    queues.offer(1, "b0")
    queues.offer(2, "c0")
    order = [queues.take() for _ in range(7)]
    assert order[:4] == ["a0", "b0", "c0", "a1"]
    assert queues.take() is None and len(queues) == 0


def test_full_queue_refuses_only_that_rank() -> None:
    queues: FairQueues[int] = FairQueues(capacity=2)
    assert queues.offer(0, 1) and queues.offer(0, 2)
    assert not queues.offer(0, 3)
    assert queues.offer(1, 4)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        FairQueues(0)


def test_weighted_round_robin_is_proportional_and_interleaved() -> None:
    picker = WeightedRoundRobin([3, 1])
    picks = [picker.next() for _ in range(8)]
    assert Counter(picks) == {0: 6, 1: 2}
    assert picks[:4].count(1) == 1  # the light proxy is not left to the end
