"""Malformed messages to the DiLoCo synchroniser, the reported ones each by name: before, a
descriptor naming an array frame that is not there ended it with StopIteration, deep JSON
with RecursionError, a round of 1e400 (JSON's way to say infinity) with OverflowError, and an
object-dtype inline array with SIGSEGV. Against the real synchroniser process (`python -m
runtime.diloco`): each is dropped, logged with the peer and counted, and a real learner
then joins, syncs and leaves as if nothing had come."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import zmq

from runtime.aux.wire import REQUEST, encode_request
from runtime.diloco.config import DilocoConfig
from runtime.diloco.learner import DilocoLearner
from runtime.diloco.link import read_request
from tests.diloco.procs import ROOT, RUN_TIMEOUT_S, START_TIMEOUT_S
from tests.runtime_train.test_aux_fuzz import Target


def _head(descriptor: object, tail: bytes = b"") -> bytes:
    text = json.dumps(descriptor).encode() if not isinstance(descriptor, bytes) else descriptor
    return REQUEST.pack(1, 0, 0, 0.0, len(text)) + text + tail


DEEP = b'{"method":"sync","meta":' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}"
HOSTILE = {
    # StopIteration: an array said to travel in a frame of its own, and no frame
    "missing frame": [_head({"method": "sync", "meta": {"learner": "a", "round": 0},
                             "arrays": [["weights", "<f4", [4096], True, False]]})],
    "deep nesting": [_head(DEEP)],  # RecursionError
    "infinite round": [_head(b'{"method":"sync","meta":{"learner":"a","round":1e400}}')],
    "huge round": [_head({"method": "sync", "meta": {"learner": "a", "round": 1 << 70}})],
    "object dtype": [_head({"method": "sync", "meta": {"learner": "a"},
                            "arrays": [["weights", "|O", [4], True, True]]}, b"\x41" * 32)],
    "weights not a tensor": [_head({"method": "join", "meta": {"learner": "a", "round": 0,
                                                               "weights": 5}})],
    "name not a string": [_head({"method": "join", "meta": {"learner": ["a"]}})],
    "one byte": [b"\x00"],
    "probe": [REQUEST.pack(1, 0, 0, 0.0, 0)],
}


@pytest.fixture(scope="module")
def decoder() -> Iterator[Target]:
    """The decoders in a child process: the object-dtype message crashed the old one."""
    target = Target("decode")
    yield target
    target.process.stdin.close()  # type: ignore[union-attr]
    assert target.process.wait(RUN_TIMEOUT_S) == 0


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_reported_message_is_a_typed_refusal(decoder: Target, name: str) -> None:
    outcomes = decoder.send(HOSTILE[name])
    assert outcomes[2] == "WireError", outcomes  # runtime.diloco.link.read_request


def test_a_valid_request_still_reads() -> None:
    head, *frames = encode_request(3, 0, 0.0, "sync", {"learner": "a", "round": 2,
                                                       "weights": torch.ones(3)})
    request = read_request(b"peer", bytes(head), frames)
    assert (request.rid, request.learner, request.round) == (3, "a", 2)
    assert request.weights is not None and request.weights.tolist() == [1.0, 1.0, 1.0]


def _start(folder: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """The real synchroniser in a process of its own (a crash fails the test, not pytest),
    plaintext: these messages must reach its decoder, as an authenticated learner's would."""
    log, out = folder / "synchroniser.log", folder / "synchroniser.out"
    with log.open("wb") as err, out.open("wb") as std:
        process = subprocess.Popen(
            [sys.executable, "-m", "runtime.diloco", "--bind", "tcp://127.0.0.1:*",
             "--learners", "a", "--plaintext"], cwd=ROOT, stdout=std, stderr=err)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"listening on (\S+)", out.read_text())
        if found:
            return process, found[1], log
        time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the synchroniser did not start: {log.read_text()[-2000:]}")


@pytest.mark.slow
def test_the_synchroniser_drops_them_all_and_serves_on(tmp_path: Path) -> None:
    process, endpoint, log = _start(tmp_path)
    stray = zmq.Context.instance().socket(zmq.DEALER)
    stray.setsockopt(zmq.LINGER, 0)
    stray.connect(endpoint)
    try:
        for message in HOSTILE.values():
            stray.send_multipart(message)
        config = DilocoConfig.model_validate({
            "enabled": True, "endpoint": endpoint, "learner": "a", "plaintext": True,
            "inner_steps": 1, "timeout_s": 120, "round_timeout_s": 30})
        learner = DilocoLearner(config, torch.nn.Linear(3, 2), rank=0)
        learner.join()
        learner.after_step(1)
        learner.close()
        assert process.wait(RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
    finally:
        stray.close()
        if process.poll() is None:
            process.kill()
    text = log.read_text()
    assert text.count("dropped a malformed message from peer") == len(HOSTILE), text[-3000:]
    assert "merged 1 learners (a)" in text
