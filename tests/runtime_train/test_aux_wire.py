"""Wire format, per-rank fair queues and weighted round-robin of the remote-call layer."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
import zmq

from runtime.aux.client import WeightedRoundRobin
from runtime.aux.fairqueue import FairQueues
from runtime.aux.wire import (
    COPY_THRESHOLD,
    INLINE_LIMIT,
    REPLY,
    REQUEST,
    Status,
    decode_body,
    encode_probe,
    encode_reply,
    encode_request,
    is_probe,
    read_descriptor,
    recv_message,
    request_id,
    send_message,
)


def test_round_trip_keeps_arrays_tensors_and_plain_values() -> None:
    payload: dict[str, Any] = {
        "x": np.arange(12, dtype=np.float32).reshape(3, 4),
        "t": torch.ones(2, 5, dtype=torch.int64),
        "empty": np.zeros((0, 3)),
        "label": "cat",
        "k": 3,
    }
    head, *frames = encode_request(7, 3, 12.5, "echo", payload)
    assert REQUEST.unpack_from(head)[:4] == (7, 3, 0, 12.5)  # id, rank, min version, deadline
    descriptor, offset = read_descriptor(head, REQUEST)
    assert descriptor["method"] == "echo"
    assert frames == []  # every array here is small enough to ride in the head
    out = decode_body(descriptor, offset, head, frames)
    np.testing.assert_array_equal(out["x"], payload["x"])
    assert isinstance(out["t"], torch.Tensor) and torch.equal(out["t"], payload["t"])
    assert out["empty"].shape == (0, 3)
    assert all(out[k].ctypes.data % 16 == 0 for k in ("x", "empty"))  # aligned in the head
    assert (out["label"], out["k"]) == ("cat", 3)


def test_arrays_are_views_of_the_received_frames() -> None:
    """Over a real socket pair: the decoded array maps the ZeroMQ frame, no copy."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    server, client = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        big = np.random.default_rng(0).random(1 << 15)
        assert big.nbytes >= COPY_THRESHOLD
        send_message(client, encode_request(1, 0, 0.0, "echo", {"x": big, "s": np.ones(4)}))
        assert server.poll(5000)
        head, *frames = recv_message(server, heads=1)
        descriptor, offset = read_descriptor(head, REQUEST)
        out = decode_body(descriptor, offset, head, frames)
        (frame,) = frames  # the small array rode in the head
        assert np.shares_memory(out["x"], np.frombuffer(frame.buffer, dtype=np.uint8))
        np.testing.assert_array_equal(out["s"], 1.0)
        np.testing.assert_array_equal(out["x"], big)
    finally:
        server.close()
        client.close()


def test_an_array_sent_back_whole_goes_out_as_its_received_frame() -> None:
    """A service that returns an array it was sent: the reply shares the received frame."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    server, client = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        send_message(client, encode_request(1, 0, 0.0, "echo", {"x": np.ones((4, INLINE_LIMIT))}))
        assert server.poll(5000)
        head, *frames = recv_message(server, heads=1)
        received = decode_body(*read_descriptor(head, REQUEST), head, frames)
        _, sent = encode_reply(1, Status.OK, received)
        assert sent is frames[0]
        _, copied = encode_reply(1, Status.OK, {"x": received["x"][:2]})  # part of it
        assert copied is not frames[0]
    finally:
        server.close()
        client.close()


def test_a_probe_is_a_request_head_without_descriptor() -> None:
    (probe,) = encode_probe(5, 2)
    assert is_probe(probe) and REQUEST.unpack_from(probe)[:2] == (5, 2)
    (request,) = encode_request(5, 2, 0.0, "echo", None)
    assert not is_probe(request)


def test_replies_carry_status_timings_and_failures_in_the_head() -> None:
    big = np.ones(INLINE_LIMIT, dtype=np.uint8)
    ok, *frames = encode_reply(9, Status.OK, {"y": np.ones(3), "big": big}, (0.25, 0.5),
                               worker=77)
    assert request_id(ok) == 9 and REPLY.unpack_from(ok)[:5] == (9, Status.OK, 0.25, 0.5, 77)
    assert len(frames) == 1  # only the array of INLINE_LIMIT bytes has its own frame
    out = decode_body(*read_descriptor(ok, REPLY), ok, frames)
    np.testing.assert_array_equal(out["y"], 1.0)
    np.testing.assert_array_equal(out["big"], big)
    (failed,) = encode_reply(4, Status.ERROR, failure={"error_type": "KeyError", "error": "k"})
    assert read_descriptor(failed, REPLY)[0] == {"error_type": "KeyError", "error": "k"}
    (busy,) = encode_reply(5, Status.BUSY)
    assert len(busy) == REPLY.size and read_descriptor(busy, REPLY) == ({}, REPLY.size)


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
