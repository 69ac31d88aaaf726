"""Property-based fuzzing of everything that reads the wire: random frames and mutated valid
frames, against the real decoders and against a real proxy and worker over real ZeroMQ
sockets. Each target runs in a child process (tests.runtime_train.wire_target), so that a
crash fails the test rather than ending pytest; hypothesis runs derandomised (a fixed seed)
with no per-example deadline, so the run is the same under any CPU load."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.aux.client import AuxClient, Endpoint, ServiceHandle
from runtime.aux.wire import INLINE_LIMIT, REPLY, REQUEST, Status, encode_reply, encode_request

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120.0  # a torch import on a loaded two-core machine takes seconds
FUZZ = settings(max_examples=250, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Dtypes a hostile descriptor may name: the allowed ones and those the issue exploited.
DTYPES = ["<f4", "<i8", "|u1", "|b1", "|O", "|O8", "|V8", "<M8[s]", ">f4", "|S4", "<U2",
          "[('a', '<i4')]", "float32", "", "<f16"]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=20)


class Target:
    """A child process running a wire target; reports whether it still lives."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime_train.wire_target", *args], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        assert line, f"the target process died (exit {self.process.wait(TIMEOUT_S)})"
        return line

    def send(self, message: list[bytes]) -> list[str]:
        assert self.process.stdin is not None
        data = struct.pack("<I", len(message)) + b"".join(
            struct.pack("<I", len(frame)) + frame for frame in message)
        self.process.stdin.write(data)
        self.process.stdin.flush()
        outcomes: list[str] = json.loads(self.line())
        return outcomes

    def report(self) -> dict[str, Any]:
        """The serving target's worker report, asked for while it serves."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"report\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.line())
        return answer

    def finish(self) -> str:
        assert self.process.stdin is not None
        self.process.stdin.close()
        out = self.line()
        assert self.process.wait(TIMEOUT_S) == 0
        return out


@pytest.fixture(scope="module")
def decoder() -> Iterator[Target]:
    target = Target("decode")
    yield target
    assert target.process.stdin is not None
    target.process.stdin.close()
    assert target.process.wait(TIMEOUT_S) == 0, "the decoder process crashed"


def _valid_messages() -> list[list[bytes]]:
    """Valid requests and replies of every shape the layer sends, as bytes."""
    big = np.arange(INLINE_LIMIT, dtype=np.float32)
    payloads: list[dict[str, Any]] = [
        {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "label": "a"},
        {"learner": "a", "round": 3, "weights": torch.ones(4)},
        {"learner": "a", "round": 1, "weights": torch.from_numpy(big)},
        {"t": torch.zeros(2, 2, dtype=torch.int64), "big": big},
    ]
    messages = []
    for payload in payloads:
        messages.append(encode_request(1, 0, 0.0, "sync", payload))
        messages.append(encode_reply(1, Status.OK, {**payload, "rejoined": False}))
    messages.append(encode_reply(2, Status.ERROR, failure={"error_type": "E", "error": "x"}))
    return [[bytes(memoryview(frame)) for frame in message] for message in messages]


VALID = _valid_messages()


@st.composite
def mutated(draw: st.DrawFn) -> list[bytes]:
    """A valid message with some of: bytes flipped, a frame cut, frames dropped or added."""
    message = [bytearray(frame) for frame in draw(st.sampled_from(VALID))]
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(message) - 1))
        frame = message[index]
        action = draw(st.sampled_from(["flip", "cut", "drop", "add", "grow"]))
        if action == "flip" and frame:
            frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
        elif action == "cut":
            del frame[draw(st.integers(0, len(frame))):]
        elif action == "drop" and len(message) > 1:
            del message[index]
        elif action == "add":
            message.append(bytearray(draw(st.binary(max_size=64))))
        elif action == "grow":
            frame += draw(st.binary(min_size=1, max_size=32))
    return [bytes(frame) for frame in message]


@st.composite
def forged(draw: st.DrawFn) -> list[bytes]:
    """A well-formed head whose descriptor is hostile: any dtype, shape, flags and JSON."""
    spec = [draw(st.text(max_size=3)), draw(st.sampled_from(DTYPES)),
            draw(st.lists(st.integers(-2, 1 << 62) | st.just(0), max_size=4)),
            draw(st.booleans()), draw(st.booleans())]
    descriptor = draw(st.fixed_dictionaries(
        {"arrays": st.just([spec]) | st.lists(JSON, max_size=2)},
        optional={"method": st.sampled_from(["sync", "join", "echo"]) | JSON, "meta": JSON,
                  "error": JSON, "tag": JSON}))
    text = json.dumps(descriptor).encode()
    prefix = draw(st.sampled_from([REQUEST, REPLY]))
    fields = (1, 0, 0, 0.0) if prefix is REQUEST else (1, Status.OK, 0.0, 0.0, 0)
    head = prefix.pack(*fields, len(text)) + text + draw(st.binary(max_size=96))
    return [head, *draw(st.lists(st.binary(max_size=64), max_size=2))]


def _typed(outcomes: list[str]) -> None:
    assert all(o in ("ok", "WireError", "DilocoError") for o in outcomes), outcomes


@FUZZ
@given(st.lists(st.binary(max_size=160), min_size=1, max_size=4))
def test_random_frames_are_refused_typed(decoder: Target, message: list[bytes]) -> None:
    _typed(decoder.send(message))


@FUZZ
@given(mutated())
def test_mutated_valid_frames_are_refused_typed(decoder: Target, message: list[bytes]) -> None:
    _typed(decoder.send(message))


@FUZZ
@given(forged())
def test_forged_descriptors_are_refused_typed(decoder: Target, message: list[bytes]) -> None:
    _typed(decoder.send(message))


def test_valid_messages_still_decode(decoder: Target) -> None:
    for message in VALID:
        outcomes = decoder.send(message)
        assert outcomes[0] == "ok" or outcomes[1] == "ok", outcomes


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Target, str]]:
    target = Target("serve", str(tmp_path_factory.mktemp("fuzz-worker")))
    yield target, target.line().strip()
    target.process.kill()


@pytest.fixture(scope="module")
def hostile(worker: tuple[Target, str]) -> Iterator[zmq.Socket]:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(worker[1])
    yield sock
    sock.close()


@pytest.fixture(scope="module")
def honest(worker: tuple[Target, str]) -> Iterator[AuxClient]:
    client = AuxClient(ServiceHandle("echo", (Endpoint(worker[1], 1),), TIMEOUT_S, 0), rank=0)
    yield client
    client.close()


def _still_serves(worker: tuple[Target, str], client: AuxClient) -> None:
    assert worker[0].process.poll() is None, "the worker process died"
    assert client.call("echo", {"v": np.arange(3)})["v"].tolist() == [0, 1, 2]


@settings(FUZZ, max_examples=120)
@given(st.one_of(mutated(), forged(), st.lists(st.binary(max_size=96), min_size=1, max_size=3)))
def test_a_real_worker_survives_hostile_frames(
    worker: tuple[Target, str], hostile: zmq.Socket, honest: AuxClient, message: list[bytes]
) -> None:
    """Over real sockets: each hostile message, then an honest call that must be answered
    (the serving thread lives and the process too)."""
    hostile.send_multipart(message)
    _still_serves(worker, honest)


def test_the_one_byte_frame_is_dropped_counted_and_serving_goes_on(tmp_path: Path) -> None:
    """The 1-byte frame that stopped a worker's serving thread while its actor said healthy,
    on a worker of its own (so that test order does not matter)."""
    target = Target("serve", str(tmp_path))
    address = target.line().strip()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    client = AuxClient(ServiceHandle("echo", (Endpoint(address, 1),), TIMEOUT_S, 0), rank=0)
    try:
        sock.send(b"\x00")
        # The frame and the honest call travel on two connections, which nothing orders:
        # wait (bounded) until the worker has counted the frame, then ask it to serve.
        deadline = time.monotonic() + TIMEOUT_S
        while target.report()["malformed"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        _still_serves((target, address), client)
        report = json.loads(target.finish())
    finally:
        client.close()
        sock.close()
        target.process.kill()
    assert report == {"malformed": 1, "healthy": True}
