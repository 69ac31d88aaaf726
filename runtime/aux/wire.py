"""The wire format of the remote-call layer: one head frame, then one frame per large array.

The head frame starts with a fixed binary prefix (`struct`) that every hop can route on
without parsing anything else: a request's id, rank and deadline, or a reply's id, status
and timings, and the length of the JSON descriptor that follows. The descriptor holds the
method, the plain payload values, each array's dtype and shape, or a failure's type and
message, so that a frame read off the wire still says what it is. Only the endpoints (client
and worker) parse it; the proxy reads the prefix alone.

Arrays under `INLINE_LIMIT` bytes ride at the end of the head frame: a frame of their own
costs more than copying them. Larger arrays and tensors travel as their own frames, sent
without a copy from `COPY_THRESHOLD` bytes up and mapped by the receiver with
`numpy.frombuffer`; below it pyzmq copies them, which is cheaper than tracking the buffer.
"""

from __future__ import annotations

import json
import math
import struct
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
import zmq

__all__ = [
    "CONTROL",
    "COPY_THRESHOLD",
    "INLINE_LIMIT",
    "REPLY",
    "REQUEST",
    "Status",
    "decode_body",
    "drain",
    "encode_reply",
    "encode_request",
    "read_descriptor",
    "recv_message",
    "request_id",
    "send_message",
    "tune",
]

# Frame 0 of a worker-to-proxy message is the client identity; empty marks a control message.
CONTROL = b""

# Measured by echoing one frame over loopback TCP, copied vs zero-copy both ways: a copy wins
# at 64 KiB (164 vs 212 us), zero-copy from 256 KiB (309 vs 379 us), as pyzmq then tracks the
# buffer through its garbage-collector thread. pyzmq's own default threshold is 64 KiB.
COPY_THRESHOLD = 128 << 10
INLINE_LIMIT = 8 << 10  # arrays below this many bytes are copied into the head frame
_ALIGN = 16  # inline arrays start on this boundary, as numpy's and torch's kernels prefer

REQUEST = struct.Struct("<QIdI")  # id, rank, deadline (wall clock; 0: none), descriptor length
REPLY = struct.Struct("<QBddI")  # id, status, queue wait s, processing s, descriptor length
_ID = struct.Struct("<Q")  # both prefixes start with the request id

# Distinct descriptors remembered per process (a service sees a few methods and shapes);
# past this many, new ones are encoded and parsed each time instead.
DESCRIPTOR_CACHE = 1024
_TEXTS: dict[tuple[Any, ...], bytes] = {}
_PARSED: dict[bytes, dict[str, Any]] = {}
_JSON = json.JSONEncoder(separators=(",", ":"))


class Status:
    """Values of a reply's status byte."""

    OK = 0
    ERROR = 1  # the service raised; not retried
    BUSY = 2  # the rank's queue was full; the client may retry
    LOST = 3  # the worker died with the request in flight
    EXPIRED = 4  # the deadline passed before the request was served


# Plain ints: pyzmq's enum arithmetic shows up in profiles of the forwarding loop.
_EVENTS, _POLLIN, _NOBLOCK, _SNDMORE = (
    int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK), int(zmq.SNDMORE)
)


def tune(sock: zmq.Socket) -> zmq.Socket:
    """Options every socket of the layer shares: close at once, copy small frames."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.copy_threshold = COPY_THRESHOLD
    return sock


def recv_message(sock: zmq.Socket, heads: int) -> list[Any]:
    """One message: its first `heads` frames (identities, head) as bytes, the array frames
    after them as zmq.Frames, whose memory numpy maps without a copy. (A Frame knows whether
    more follow; asking the socket for RCVMORE costs more.)"""
    frame = sock.recv(_NOBLOCK, copy=False)  # callers know a message waits: never hang here
    parts: list[bytes | zmq.Frame] = [frame.bytes]
    while frame.more:
        frame = sock.recv(0, copy=False)
        parts.append(frame.bytes if len(parts) < heads else frame)
    return parts


def send_message(sock: zmq.Socket, frames: Sequence[Any]) -> None:
    """Send frames as one message; each is copied or not by the socket's copy_threshold."""
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        sock.send(frame, _SNDMORE if index < last else 0, copy=False)


def drain(sock: zmq.Socket, heads: int, ready: bool = False) -> Iterator[list[Any]]:
    """Every message waiting on `sock`, without blocking; `ready` when a poll just said a
    message is there. Asks the socket's event state rather than provoking zmq.Again."""
    # ZMQ_EVENTS is an int option, but pyzmq types every option looked up by number as
    # int | bytes.
    while ready or cast(int, sock.getsockopt(_EVENTS)) & _POLLIN:
        ready = False
        yield recv_message(sock, heads)


def request_id(head: bytes) -> int:
    """The id a request or reply head starts with."""
    return _ID.unpack_from(head)[0]


def _as_array(value: Any) -> tuple[np.ndarray, bool] | None:
    if isinstance(value, torch.Tensor):
        return np.ascontiguousarray(value.detach().cpu().numpy()), True
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value), False
    return None


def _split(payload: Mapping[str, Any]) -> tuple[dict[str, Any], tuple, list[Any], list[Any]]:
    """Plain values, array specs, inline array bytes (padded) and large-array frames."""
    meta: dict[str, Any] = {}
    specs: list[tuple[Any, ...]] = []
    inline: list[Any] = []
    frames: list[Any] = []
    for key, value in payload.items():
        found = _as_array(value)
        if found is None:
            meta[key] = value
            continue
        array, is_tensor = found
        small = array.nbytes < INLINE_LIMIT
        specs.append((key, array.dtype.str, array.shape, is_tensor, small))
        data = array.reshape(-1).view(np.uint8).data
        if small:
            inline += (data, bytes(-array.nbytes % _ALIGN))
        else:
            frames.append(data)
    return meta, tuple(specs), inline, frames


def _describe(fields: tuple[tuple[str, Any], ...], meta: dict[str, Any], specs: tuple) -> bytes:
    """The descriptor's JSON. Without plain values it depends only on the method and the
    arrays' shapes, which repeat call after call, so that text is remembered."""
    if meta or not specs:
        descriptor = dict(fields)
        if meta or specs:
            descriptor["meta"], descriptor["arrays"] = meta, specs
        return _JSON.encode(descriptor).encode() if descriptor else b""
    key = (fields, specs)
    text = _TEXTS.get(key)
    if text is None:
        text = _JSON.encode({**dict(fields), "meta": {}, "arrays": specs}).encode()
        if len(_TEXTS) < DESCRIPTOR_CACHE:
            _TEXTS[key] = text
    return text


def _encode(
    prefix: struct.Struct, values: tuple[Any, ...], fields: tuple[tuple[str, Any], ...],
    payload: Mapping[str, Any] | None,
) -> list[Any]:
    """Head frame plus large-array frames, which share memory with the caller's arrays."""
    meta, specs, inline, frames = _split(payload) if payload else ({}, (), [], [])
    text = _describe(fields, meta, specs)
    if inline:  # JSON allows trailing blanks: they align the first inline array
        text += b" " * (-(prefix.size + len(text)) % _ALIGN)
    return [b"".join((prefix.pack(*values, len(text)), text, *inline)), *frames]


def encode_request(
    rid: int, rank: int, deadline: float, method: str, payload: Mapping[str, Any] | None
) -> list[Any]:
    """A request's frames: routing prefix, method and payload description, arrays."""
    return _encode(REQUEST, (rid, rank, deadline), (("method", method),), payload)


def encode_reply(
    rid: int, status: int, payload: Mapping[str, Any] | None = None,
    timing: tuple[float, float] = (0.0, 0.0), failure: dict[str, str] | None = None,
) -> list[Any]:
    """A reply's frames; `timing` is the worker's (queue wait, processing) in seconds."""
    fields = tuple(failure.items()) if failure else ()
    return _encode(REPLY, (rid, status, *timing), fields, payload)


def read_descriptor(head: bytes, prefix: struct.Struct) -> tuple[Mapping[str, Any], int]:
    """The JSON descriptor after the binary prefix (empty when there is none) and the offset
    where the inline arrays start. Descriptors without plain values or failures are shared
    between calls (remembered by their text): read them, never change them."""
    start = prefix.size
    end = start + prefix.unpack_from(head)[-1]
    if end == start:
        return {}, end
    text = head[start:end]
    descriptor = _PARSED.get(text)
    if descriptor is None:
        descriptor = json.loads(text)
        shared = not descriptor.get("meta") and "error" not in descriptor
        if shared and len(_PARSED) < DESCRIPTOR_CACHE:
            _PARSED[text] = descriptor
    return descriptor, end


def decode_body(
    descriptor: Mapping[str, Any], offset: int, head: bytes, frames: Sequence[Any]
) -> dict[str, Any]:
    """The payload of a decoded descriptor: inline arrays are read-only views of the head,
    large ones of their received frames."""
    payload: dict[str, Any] = dict(descriptor.get("meta", {}))
    large = iter(frames)
    for key, dtype, shape, is_tensor, small in descriptor.get("arrays", ()):
        kind = np.dtype(dtype)
        if small:
            count = math.prod(shape)
            array = np.frombuffer(head, kind, count, offset)
            offset += count * kind.itemsize
            offset += -offset % _ALIGN
        else:
            array = np.frombuffer(next(large), kind)
        array = array.reshape(shape)
        payload[key] = _tensor(array) if is_tensor else array
    return payload


def _tensor(array: np.ndarray) -> torch.Tensor:
    # The frame is read-only; torch warns about that on every call, but we never write to it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)
