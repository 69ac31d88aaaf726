"""DiLoCo's messages over ZeroMQ TCP, in the remote-call layer's wire format
(`runtime.aux.wire`): a learner's DEALER asks, the synchroniser's ROUTER answers.

Learners dial the synchroniser (one Service address per experiment), never the reverse: a
learner behind another cluster's network has no address the synchroniser could reach. Every
request carries the learner's name; `sync` and `join` carry its weights as one flat tensor,
which the wire format sends without a copy; a reply carries the merged weights and the round
they complete.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import zmq

from runtime.aux.errors import WireError
from runtime.aux.wire import (
    REPLY,
    REQUEST,
    Status,
    decode,
    drain,
    encode_reply,
    encode_request,
    request_id,
    send_message,
    tune,
)
from runtime.diloco import fields
from runtime.diloco.errors import DilocoError
from runtime.diloco.keys import ClientKeys
from runtime.diloco.secure import secure_client

log = logging.getLogger(__name__)
JOIN, SYNC, LEAVE = "join", "sync", "leave"


def frame_bytes(frames: Sequence[Any]) -> int:
    """Bytes of a message on the wire (frames only; TCP and ZMTP framing not counted)."""
    return sum(memoryview(frame).nbytes for frame in frames)


@dataclass(frozen=True)
class Merged:
    """The synchroniser's answer: the shared weights as of `round` merges."""

    round: int
    weights: torch.Tensor | None  # read-only view of the received frame (None: a `leave`)
    rejoined: bool  # the learner's snapshot was not merged; these weights replace its own
    received: int  # bytes


class LearnerLink:
    """One learner's connection to the synchroniser (its rank 0 holds it)."""

    def __init__(self, endpoint: str, learner: str, keys: ClientKeys | None) -> None:
        """`keys`: this learner's CURVE keys (None: a plaintext link, which only a
        synchroniser without keys answers)."""
        self.learner = learner
        self.sock = tune(zmq.Context.instance().socket(zmq.DEALER))
        if keys is not None:
            secure_client(self.sock, keys)
        self.sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._done: dict[int, list[Any]] = {}
        self._abandoned: set[int] = set()  # waited for in vain: a late reply is dropped
        self.sent = 0  # bytes, all requests so far
        self.malformed = 0  # replies dropped because the wire decoder refused them

    def submit(self, method: str, round_: int = 0, weights: torch.Tensor | None = None) -> int:
        """Send a request without waiting; returns its id."""
        rid = next(self._ids)
        payload: dict[str, Any] = {"learner": self.learner, "round": round_}
        if weights is not None:
            payload["weights"] = weights
        frames = encode_request(rid, 0, 0.0, method, payload)
        self.sent += frame_bytes(frames)
        send_message(self.sock, frames)
        return rid

    def poll(self, rid: int) -> Merged | None:
        """The reply to `rid` if it has arrived; never blocks."""
        self._receive(0)
        return self._decoded(rid) if rid in self._done else None

    def wait(self, rid: int, timeout_s: float) -> Merged | None:
        """The reply to `rid`, waiting up to `timeout_s`; None when none came in time (a
        reply that comes later is dropped)."""
        deadline = time.monotonic() + timeout_s
        while rid not in self._done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._abandoned.add(rid)
                return None
            self._receive(remaining)
        return self._decoded(rid)

    def _decoded(self, rid: int) -> Merged | None:
        """The reply to `rid`; a malformed one is dropped and counted, and the learner
        treats it as no answer (it trains on and rejoins at its next sync)."""
        try:
            return _merged(self._done.pop(rid))
        except WireError as error:
            self.malformed += 1
            log.warning("learner %s: dropped a malformed reply: %s", self.learner, error)
            return None

    def _receive(self, timeout_s: float) -> None:
        if not self.sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            return
        for head, *frames in drain(self.sock, heads=1, ready=True):
            try:
                rid = request_id(head)
            except WireError as error:
                self.malformed += 1
                log.warning("learner %s: dropped a malformed reply: %s", self.learner, error)
                continue
            if rid in self._abandoned:
                self._abandoned.discard(rid)
            else:
                self._done[rid] = [head, *frames]

    def close(self) -> None:
        self.sock.close()


def _merged(message: list[Any]) -> Merged:
    """The synchroniser's reply, checked (runtime.aux.wire, runtime.diloco.fields); a
    malformed one raises WireError."""
    head, *frames = message
    (_, status, *_), descriptor, body = decode(head, frames, REPLY)
    if status != Status.OK:
        raise DilocoError(f"the synchroniser refused: {descriptor.get('error', 'no reason')}")
    return Merged(fields.round_number(body), fields.weights(body),
                  fields.flag(body, "rejoined"), frame_bytes(message))


@dataclass(frozen=True)
class Request:
    """A learner's request as the synchroniser reads it."""

    client: bytes  # the ROUTER's identity of the learner's socket
    rid: int
    method: str
    learner: str
    round: int
    weights: torch.Tensor | None
    received: int  # bytes


def read_request(client: bytes, head: bytes, frames: list[Any]) -> Request:
    """Decode one request (frames after the ROUTER's identity frame), checked whole
    (runtime.aux.wire, runtime.diloco.fields); a malformed one raises WireError."""
    (rid, *_), descriptor, body = decode(head, frames, REQUEST)
    if not descriptor:
        raise WireError("a request without a descriptor (a probe) is no DiLoCo request")
    return Request(client, rid, descriptor["method"], fields.learner_name(body),
                   fields.round_number(body), fields.weights(body), frame_bytes([head, *frames]))


def send_merged(sock: zmq.Socket, request: Request, round_: int,
                weights: torch.Tensor | None, rejoined: bool = False) -> int:
    """Answer a request with the shared weights (None: an acknowledgement); returns the
    bytes sent."""
    payload: dict[str, Any] = {"round": round_, "rejoined": rejoined}
    if weights is not None:
        payload["weights"] = weights
    frames = encode_reply(request.rid, Status.OK, payload)
    send_message(sock, [request.client, *frames])
    return frame_bytes(frames)


def send_refusal(sock: zmq.Socket, request: Request, why: str) -> None:
    frames = encode_reply(request.rid, Status.ERROR, failure={"error_type": "DilocoError",
                                                               "error": why})
    send_message(sock, [request.client, *frames])
