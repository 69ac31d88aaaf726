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
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

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

# Measured with benchmarks/aux_rpc.py's sizes over loopback TCP: a copy wins at 64 KiB,
# zero-copy (pyzmq then tracks the buffer through its garbage-collector thread) from 256 KiB;
# pyzmq's own default threshold is 64 KiB.
COPY_THRESHOLD = 128 << 10
INLINE_LIMIT = 8 << 10  # arrays below this many bytes are copied into the head frame
_ALIGN = 16  # inline arrays start on this boundary, as numpy's and torch's kernels prefer

REQUEST = struct.Struct("<QIdI")  # id, caller's rank, deadline (wall clock; 0: none), descriptor
REPLY = struct.Struct("<QBddI")  # id, status, queue wait s, processing s, descriptor length
_ID = struct.Struct("<Q")  # both prefixes start with the request id


class Status:
    """Values of a reply's status byte."""

    OK = 0
    ERROR = 1  # the service raised; not retried
    BUSY = 2  # the rank's queue was full; the client may retry
    LOST = 3  # the worker died with the request in flight
    EXPIRED = 4  # the deadline passed before the request was served


# Plain ints: pyzmq's enum arithmetic shows up in profiles of the forwarding loop.
_EVENTS, _POLLIN, _RCVMORE, _SNDMORE = (
    int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.RCVMORE), int(zmq.SNDMORE)
)


def tune(sock: zmq.Socket) -> zmq.Socket:
    """Options every socket of the layer shares: close at once, copy small frames."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.copy_threshold = COPY_THRESHOLD
    return sock


def recv_message(sock: zmq.Socket, heads: int) -> list[Any]:
    """One message: its first `heads` frames (identities, head) as bytes, the array frames
    after them as zmq.Frames, whose memory numpy maps without a copy."""
    parts = [sock.recv(0, copy=True)]
    while sock.getsockopt(_RCVMORE):
        parts.append(sock.recv(0, copy=len(parts) < heads))
    return parts


def send_message(sock: zmq.Socket, frames: Sequence[Any]) -> None:
    """Send frames as one message; each is copied or not by the socket's copy_threshold."""
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        sock.send(frame, _SNDMORE if index < last else 0, copy=False)


def drain(sock: zmq.Socket, heads: int) -> Iterator[list[Any]]:
    """Every message waiting on `sock`, without blocking; asks the socket's event state
    instead of provoking a zmq.Again exception after the last message."""
    while sock.getsockopt(_EVENTS) & _POLLIN:
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


def _encode(
    prefix: Callable[[int], bytes], descriptor: dict[str, Any], payload: Mapping[str, Any] | None
) -> list[Any]:
    """Head frame plus large-array frames, which share memory with the caller's arrays."""
    inline: list[Any] = []
    frames: list[Any] = []
    if payload:
        meta: dict[str, Any] = {}
        specs: list[list[Any]] = []
        for key, value in payload.items():
            found = _as_array(value)
            if found is None:
                meta[key] = value
                continue
            array, is_tensor = found
            small = array.nbytes < INLINE_LIMIT
            specs.append([key, array.dtype.str, list(array.shape), is_tensor, small])
            data = array.reshape(-1).view(np.uint8).data
            if small:
                inline += (data, bytes(-array.nbytes % _ALIGN))
            else:
                frames.append(data)
        descriptor["meta"], descriptor["arrays"] = meta, specs
    return [_head(prefix, descriptor, inline), *frames]


def _head(prefix: Callable[[int], bytes], descriptor: dict[str, Any], inline: list[Any]) -> bytes:
    text = json.dumps(descriptor, separators=(",", ":")).encode() if descriptor else b""
    if inline:  # JSON allows trailing blanks: they align the first inline array
        size = len(text)
        text += b" " * (-(len(prefix(size)) + size) % _ALIGN)
    return b"".join((prefix(len(text)), text, *inline))


def encode_request(
    rid: int, rank: int, deadline: float, method: str, payload: Mapping[str, Any] | None
) -> list[Any]:
    """A request's frames: routing prefix, method and payload description, arrays."""
    return _encode(lambda size: REQUEST.pack(rid, rank, deadline, size), {"method": method},
                   payload)


def encode_reply(
    rid: int, status: int, payload: Mapping[str, Any] | None = None,
    timing: tuple[float, float] = (0.0, 0.0), failure: dict[str, str] | None = None,
) -> list[Any]:
    """A reply's frames; `timing` is the worker's (queue wait, processing) in seconds."""
    return _encode(lambda size: REPLY.pack(rid, status, *timing, size), dict(failure or {}),
                   payload)


def read_descriptor(head: bytes, prefix: struct.Struct) -> tuple[dict[str, Any], int]:
    """The JSON descriptor after the binary prefix (empty when there is none) and the offset
    where the inline arrays start."""
    start = prefix.size
    end = start + prefix.unpack_from(head)[-1]
    return (json.loads(head[start:end]) if end > start else {}), end


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
