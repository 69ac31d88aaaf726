"""The wire format of the remote-call layer: a JSON header frame plus one raw frame per array.

Arrays and tensors travel as their own frames so that ZeroMQ sends their memory without a
copy and the receiver maps them with `numpy.frombuffer`; everything else rides in the header.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import zmq

__all__ = ["CONTROL", "Status", "decode", "decode_body", "decode_header", "drain", "encode"]

# Frame 0 of a worker-to-proxy message is the client identity; empty marks a control message.
CONTROL = b""


class Status:
    """Values of a reply header's `status`."""

    OK = "ok"
    ERROR = "error"  # the service raised; not retried
    BUSY = "busy"  # the rank's queue was full; the client may retry
    LOST = "lost"  # the worker died with the request in flight
    EXPIRED = "expired"  # the deadline passed before the request was served


_EVENTS, _POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)  # plain ints: enum arithmetic is slow


def drain(sock: zmq.Socket) -> Iterator[list[Any]]:
    """Every message waiting on `sock`, without blocking; asks the socket's event state
    instead of provoking a zmq.Again exception after the last message."""
    while sock.getsockopt(_EVENTS) & _POLLIN:
        yield sock.recv_multipart(copy=False)


def _as_array(value: Any) -> tuple[np.ndarray, bool] | None:
    if isinstance(value, torch.Tensor):
        return np.ascontiguousarray(value.detach().cpu().numpy()), True
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value), False
    return None


def encode(header: Mapping[str, Any], payload: Mapping[str, Any] | None) -> list[Any]:
    """Header plus payload into frames; array frames share memory with the caller's arrays."""
    meta: dict[str, Any] = {}
    specs: list[list[Any]] = []
    frames: list[Any] = []
    for key, value in (payload or {}).items():
        found = _as_array(value)
        if found is None:
            meta[key] = value
            continue
        array, is_tensor = found
        specs.append([key, array.dtype.str, list(array.shape), is_tensor])
        frames.append(array.reshape(-1).view(np.uint8).data if array.size else b"")
    head = {**header, "meta": meta, "arrays": specs}
    return [json.dumps(head, separators=(",", ":")).encode(), *frames]


def _buffer(frame: Any) -> Any:
    return frame.buffer if hasattr(frame, "buffer") else frame


def decode_header(frame: Any) -> dict[str, Any]:
    """Only the header, for hops (the proxy) that route without touching the payload."""
    return json.loads(bytes(_buffer(frame)))


def decode(frames: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Frames back into (header, payload); arrays are read-only views of the received frames."""
    header = decode_header(frames[0])
    return header, decode_body(header, frames[1:])


def decode_body(header: Mapping[str, Any], frames: Sequence[Any]) -> dict[str, Any]:
    """The payload of an already decoded header and its array frames."""
    payload: dict[str, Any] = dict(header.get("meta", {}))
    for (key, dtype, shape, is_tensor), frame in zip(header.get("arrays", []), frames, strict=True):
        array = np.frombuffer(_buffer(frame), dtype=np.dtype(dtype)).reshape(shape)
        payload[key] = _tensor(array) if is_tensor else array
    return payload


def _tensor(array: np.ndarray) -> torch.Tensor:
    # The frame is read-only; torch warns about that on every call, but we never write to it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)
