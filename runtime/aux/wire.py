"""The wire format of the remote-call layer: one head frame, then one frame per large array.

The head frame starts with a fixed binary prefix (`struct`) that the endpoints route on
without parsing anything else: a request's id, rank and deadline (the worker's fair queues),
or a reply's id, status and timings (the client), and the length of the JSON descriptor that
follows. The descriptor holds the method, the plain payload values, each array's dtype and
shape, or a failure's type and message, so that a frame read off the wire still says what it
is. Only the endpoints (client and worker) read a message; the proxy, a libzmq device,
forwards its frames untouched.

Arrays under `INLINE_LIMIT` bytes ride at the end of the head frame: a frame of their own
costs more than copying them. Larger arrays and tensors travel as their own frames, sent
without a copy from `COPY_THRESHOLD` bytes up and mapped by the receiver with
`numpy.frombuffer`; below it pyzmq copies them, which is cheaper than tracking the buffer.

A request whose head is the bare prefix (no descriptor) is a probe: the worker answers it at
once, out of turn, with the ids of the requests it holds for the asking client (`HELD`);
the client uses that to tell which requests a lost worker took with it (runtime.aux.client).
Every reply names the worker incarnation that sent it by a 64-bit tag.
"""

from __future__ import annotations

import json
import math
import struct
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import zmq

from runtime.aux.errors import WireError

__all__ = [
    "COPY_THRESHOLD",
    "INLINE_LIMIT",
    "REPLY",
    "REQUEST",
    "Status",
    "WireError",
    "decode",
    "decode_body",
    "drain",
    "encode_probe",
    "encode_reply",
    "encode_request",
    "is_probe",
    "parse_json",
    "read_descriptor",
    "read_head",
    "recv_message",
    "request_id",
    "send_message",
    "tune",
    "waiting",
]

# Measured by echoing one frame over loopback TCP, copied vs zero-copy both ways: a copy wins
# at 64 KiB (164 vs 212 us), zero-copy from 256 KiB (309 vs 379 us), as pyzmq then tracks the
# buffer through its garbage-collector thread. pyzmq's own default threshold is 64 KiB.
COPY_THRESHOLD = 128 << 10
INLINE_LIMIT = 8 << 10  # arrays below this many bytes are copied into the head frame
_ALIGN = 16  # inline arrays start on this boundary, as numpy's and torch's kernels prefer
_PADS = [bytes(n) for n in range(_ALIGN)]

# id, rank, lowest weight version that may serve it (runtime.aux.refresh), deadline (wall
# clock; 0: none), descriptor length
REQUEST = struct.Struct("<QIIdI")
# id, status, queue wait s, processing s, tag of the worker incarnation, descriptor length
REPLY = struct.Struct("<QBddQI")
_ID = struct.Struct("<Q")  # both prefixes start with the request id

# Distinct descriptors remembered per process (a service sees a few methods and shapes);
# past this many, new ones are encoded and parsed each time instead.
DESCRIPTOR_CACHE = 1024
_TEXTS: dict[tuple[Any, ...], bytes] = {}
# By prefix size (requests and replies allow different fields: one text may be valid as one
# and not the other), then by text.
_PARSED: dict[int, dict[bytes, dict[str, Any]]] = {}
_PLANS: dict[int, Any] = {}  # by id() of a descriptor in _PARSED
_JSON = json.JSONEncoder(separators=(",", ":"))

# What a received message may hold (checked before anything of it is mapped or used).
MAX_NESTING = 32  # levels of JSON objects and lists in a descriptor
MAX_ARRAYS = 1024  # arrays per message, so frames per message too
MAX_DIMS = 32  # numpy's own limit is 64
MAX_ELEMENTS = 1 << 40  # per array, and per dimension
# Only plain numeric dtypes, in native or no byte order (torch maps no other): an object,
# void (structured), string or datetime dtype is refused, whatever the wire says.
_DTYPES: dict[str, np.dtype[Any]] = {
    np.dtype(kind).str: np.dtype(kind) for kind in (
        np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
        np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128)
}
_TEXT_FIELDS = frozenset({"method", "error_type", "error"})
_KEYS = {REQUEST.size: frozenset({"method", "meta", "arrays"}),
         REPLY.size: frozenset({"error_type", "error", "meta", "arrays"})}
_ANY_KEYS = _KEYS[REQUEST.size] | _KEYS[REPLY.size]
# arrays (key, dtype, shape, tensor?, inline?, bytes), inline bytes in all, array frames
_Plan = tuple[tuple[tuple[Any, ...], ...], int, int]
_EMPTY_PLAN: _Plan = ((), 0, 0)


class Status:
    """Values of a reply's status byte."""

    OK = 0
    ERROR = 1  # the service raised; not retried
    BUSY = 2  # the rank's queue was full; the client may retry
    LOST = 3  # the worker died with the request in flight
    EXPIRED = 4  # the deadline passed before the request was served
    STALE = 5  # the worker's weights are older than the request's minimum version; resent
    HELD = 6  # the answer to a probe: the ids of the asking client's requests the worker holds


# Plain ints: pyzmq's enum arithmetic shows up in profiles of the forwarding loop.
_POLLIN, _NOBLOCK, _SNDMORE = int(zmq.POLLIN), int(zmq.NOBLOCK), int(zmq.SNDMORE)
# pyzmq's compiled socket methods. zmq.Socket.send wraps its own in Python for options this
# layer never uses (routing_id, group), which costs more than the libzmq call it makes.
_SEND, _RECV = zmq.backend.Socket.send, zmq.backend.Socket.recv


def tune(sock: zmq.Socket) -> zmq.Socket:
    """Options every socket of the layer shares: close at once, copy small frames."""
    sock.setsockopt(zmq.LINGER, 0)
    sock.copy_threshold = COPY_THRESHOLD
    return sock


def recv_message(sock: zmq.Socket, heads: int, block: bool = False) -> list[Any]:
    """One message: its first `heads` frames (with 2, a routing identity and the head; with
    1, the head) as bytes, the array frames after them as zmq.Frames, whose memory numpy
    maps without a copy. (A Frame knows whether more follow; asking the socket for RCVMORE
    costs more. An identity is always followed by more, so it is read straight as bytes.)
    Without `block` the caller knows a message waits; with it, the socket's RCVTIMEO bounds
    the wait (zmq.Again after it): one blocking call in C is the cheapest way for a thread
    to sleep until a message comes."""
    flags = 0 if block else _NOBLOCK
    parts: list[bytes | zmq.Frame] = []
    if heads == 2:
        parts.append(_RECV(sock, flags))
        flags = 0
    frame = _RECV(sock, flags, False)
    parts.append(frame.bytes)
    while frame.more:
        frame = _RECV(sock, 0, False)
        parts.append(frame.bytes if len(parts) < heads else frame)
    return parts


def send_message(sock: zmq.Socket, frames: Sequence[Any]) -> None:
    """Send frames as one message; each is copied below the socket's copy_threshold, not
    above it. Small bytes (heads, identities) are copied by the direct path, which skips
    the threshold test."""
    last = len(frames) - 1
    for index, frame in enumerate(frames):
        small = type(frame) is bytes and len(frame) < COPY_THRESHOLD
        _SEND(sock, frame, _SNDMORE if index < last else 0, small)


def waiting(sock: zmq.Socket) -> bool:
    """Whether a message waits on `sock`. A poll without timeout costs less than reading
    ZMQ_EVENTS (pyzmq looks the option up in a Python enum) or provoking zmq.Again."""
    return bool(zmq.zmq_poll([(sock, _POLLIN)], 0))


def drain(sock: zmq.Socket, heads: int, ready: bool = False) -> Iterator[list[Any]]:
    """Every message waiting on `sock`, without blocking; `ready` when a poll just said a
    message is there."""
    while ready or waiting(sock):
        ready = False
        yield recv_message(sock, heads)


def request_id(head: bytes) -> int:
    """The id a request or reply head starts with."""
    if len(head) < _ID.size:
        raise WireError(f"a head frame of {len(head)} bytes holds no request id")
    return _ID.unpack_from(head)[0]


def encode_probe(rid: int, rank: int) -> list[Any]:
    """A probe: a request head without a descriptor."""
    return [REQUEST.pack(rid, rank, 0, 0.0, 0)]


def is_probe(head: bytes) -> bool:
    """Whether a request head is a probe (it has no descriptor, not even a method)."""
    return len(head) == REQUEST.size


def _as_array(value: Any) -> tuple[np.ndarray, bool] | None:
    """The C-contiguous array behind a payload value, and whether it was a tensor; None for
    a plain value."""
    if isinstance(value, torch.Tensor):
        array, is_tensor = value.detach().cpu().numpy(), True
    elif isinstance(value, np.ndarray):
        array, is_tensor = value, False
    else:
        return None
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array, is_tensor


def _split(payload: Mapping[str, Any]) -> tuple[dict[str, Any], tuple, list[Any], list[Any]]:
    """Plain values, array specs, inline arrays (each followed by its padding) and
    large-array frames. bytes.join reads an inline array's buffer directly."""
    meta: dict[str, Any] = {}
    specs: list[tuple[Any, ...]] = []
    inline: list[Any] = []
    frames: list[Any] = []
    for key, value in payload.items():
        if type(value) is np.ndarray and value.flags.c_contiguous:  # the common case
            array, is_tensor = value, False
        else:
            found = _as_array(value)
            if found is None:
                meta[key] = value
                continue
            array, is_tensor = found
        nbytes = array.nbytes
        small = nbytes < INLINE_LIMIT
        specs.append((key, array.dtype.str, array.shape, is_tensor, small))
        if small:
            inline += (array, _PADS[-nbytes % _ALIGN])
        else:
            frames.append(_received(array) or array.reshape(-1).view(np.uint8).data)
    return meta, tuple(specs), inline, frames


def _received(array: np.ndarray) -> zmq.Frame | None:
    """The received frame that `array` maps whole, if it does (a service that returns what
    it was sent): sending that frame again shares libzmq's buffer, where a new frame of the
    array would be copied or tracked for pyzmq's garbage collector."""
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, zmq.Frame) and len(base) == array.nbytes:
        return base
    return None


def _describe(
    prefix: struct.Struct, fields: tuple[tuple[str, Any], ...], meta: dict[str, Any],
    specs: tuple,
) -> bytes:
    """The descriptor's JSON, padded with blanks (which JSON allows) so that the first inline
    array starts aligned. Without plain values it depends only on the method and the arrays'
    shapes, which repeat call after call, so that text is remembered."""
    if meta or not specs:
        descriptor = dict(fields)
        if meta or specs:
            descriptor["meta"], descriptor["arrays"] = meta, specs
        text = _JSON.encode(descriptor).encode() if descriptor else b""
        return _pad(prefix, text) if specs else text
    key = (prefix.size, fields, specs)
    cached = _TEXTS.get(key)
    if cached is None:
        cached = _pad(prefix, _JSON.encode({**dict(fields), "meta": {}, "arrays": specs}).encode())
        if len(_TEXTS) < DESCRIPTOR_CACHE:
            _TEXTS[key] = cached
    return cached


def _pad(prefix: struct.Struct, text: bytes) -> bytes:
    return text + b" " * (-(prefix.size + len(text)) % _ALIGN)


def _encode(
    prefix: struct.Struct, values: tuple[Any, ...], fields: tuple[tuple[str, Any], ...],
    payload: Mapping[str, Any] | None,
) -> list[Any]:
    """Head frame plus large-array frames, which share memory with the caller's arrays."""
    if not payload:
        text = _describe(prefix, fields, {}, ())
        return [prefix.pack(*values, len(text)) + text]
    meta, specs, inline, frames = _split(payload)
    text = _describe(prefix, fields, meta, specs)
    return [b"".join((prefix.pack(*values, len(text)), text, *inline)), *frames]


def encode_request(
    rid: int, rank: int, deadline: float, method: str, payload: Mapping[str, Any] | None,
    min_version: int = 0,
) -> list[Any]:
    """A request's frames: routing prefix, method and payload description, arrays."""
    return _encode(REQUEST, (rid, rank, min_version, deadline), (("method", method),), payload)


def encode_reply(
    rid: int, status: int, payload: Mapping[str, Any] | None = None,
    timing: tuple[float, float] = (0.0, 0.0), failure: dict[str, str] | None = None,
    worker: int = 0,
) -> list[Any]:
    """A reply's frames; `timing` is the worker's (queue wait, processing) in seconds,
    `worker` the tag of the worker incarnation that answers."""
    fields = tuple(failure.items()) if failure else ()
    return _encode(REPLY, (rid, status, *timing, worker), fields, payload)


def read_head(head: bytes, prefix: struct.Struct) -> tuple[Any, ...]:
    """The binary prefix of a head frame, refused unless the frame holds all of it and the
    descriptor length it states."""
    if len(head) < prefix.size:
        raise WireError(f"a head frame of {len(head)} bytes; this layer's heads start with "
                        f"a {prefix.size}-byte prefix")
    fields = prefix.unpack_from(head)
    if fields[-1] > len(head) - prefix.size:
        raise WireError(f"the head says its descriptor has {fields[-1]} bytes; the frame "
                        f"holds {len(head) - prefix.size} after the prefix")
    return fields


def read_descriptor(head: bytes, prefix: struct.Struct) -> tuple[Mapping[str, Any], int]:
    """The JSON descriptor after the binary prefix (empty when there is none) and the offset
    where the inline arrays start, validated (`_validate`) before anything maps it.
    Descriptors without plain values or failures are shared between calls (remembered by
    their text, with their decoding plan): read them, never change them."""
    start = prefix.size
    end = start + read_head(head, prefix)[-1]
    if end == start:
        return {}, end
    text = head[start:end]
    parsed = _PARSED.setdefault(prefix.size, {})
    descriptor = parsed.get(text)
    if descriptor is None:
        descriptor = parse_json(text)
        plan = _validate(descriptor, _KEYS[prefix.size], prefix is REQUEST)
        shared = not descriptor.get("meta") and "error" not in descriptor
        if shared and len(parsed) < DESCRIPTOR_CACHE:
            parsed[text] = descriptor
            _PLANS[id(descriptor)] = plan  # kept alive by _PARSED: ids stay unique
    return descriptor, end


def parse_json(text: bytes) -> dict[str, Any]:
    """JSON of at most MAX_NESTING levels. The C parser refuses a deeper text than the
    interpreter's recursion limit with RecursionError before it could overflow the stack
    (CPython's Py_EnterRecursiveCall); the walk after it holds the tighter bound."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise WireError(f"the descriptor is not JSON: {str(error)[:120]}") from None
    if not isinstance(value, dict):
        raise WireError(f"the descriptor is a JSON {type(value).__name__}; it must be an object")
    _check_nesting(value)
    return value


def _check_nesting(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else ()
        if children and depth >= MAX_NESTING:
            raise WireError(f"the descriptor nests deeper than {MAX_NESTING} levels")
        stack.extend((child, depth + 1) for child in children)


def _validate(descriptor: Mapping[str, Any], keys: frozenset[str], request: bool = False
              ) -> _Plan:
    """Refuse what an endpoint of this layer never sends; the decoding plan of the rest."""
    unknown = descriptor.keys() - keys
    if unknown:
        raise WireError(f"unknown descriptor field(s) {sorted(unknown)[:5]}; allowed: "
                        f"{sorted(keys)}")
    for name in keys & _TEXT_FIELDS:
        if name in descriptor and type(descriptor[name]) is not str:
            raise WireError(f"descriptor field {name!r} must be a string")
    if request and "method" not in descriptor:
        raise WireError("a request's descriptor names no method")
    if not isinstance(descriptor.get("meta", {}), dict):
        raise WireError("descriptor field 'meta' must be an object")
    specs = descriptor.get("arrays", [])
    if not isinstance(specs, list) or len(specs) > MAX_ARRAYS:
        raise WireError(f"descriptor field 'arrays' must be a list of at most {MAX_ARRAYS}")
    return _plan(specs)


def _plan(specs: list[Any]) -> _Plan:
    """Per array: key, dtype, shape, tensor?, inline?, bytes (inline ones padded); then the
    inline bytes in all and the number of array frames."""
    arrays, inline, large = [], 0, 0
    for spec in specs:
        key, kind, shape, is_tensor, small = _spec(spec)
        exact = math.prod(shape) * kind.itemsize
        if small != (exact < INLINE_LIMIT):
            raise WireError(f"array {key!r} of {exact} bytes is marked "
                            f"{'inline' if small else 'a frame'}; arrays under {INLINE_LIMIT} "
                            "bytes ride inline, the others in frames of their own")
        span = exact + -exact % _ALIGN if small else exact
        inline, large = (inline + span, large) if small else (inline, large + 1)
        arrays.append((key, kind, shape, is_tensor, small, span))
    return tuple(arrays), inline, large


def _spec(spec: Any) -> tuple[str, np.dtype[Any], tuple[int, ...], bool, bool]:
    """One array spec, checked: numeric dtypes only (an object dtype would make received
    bytes pointers), a bounded shape of non-negative ints."""
    if not isinstance(spec, list) or len(spec) != 5:
        raise WireError("an array spec is [key, dtype, shape, tensor, inline]")
    key, dtype, shape, is_tensor, small = spec
    if type(key) is not str or type(is_tensor) is not bool or type(small) is not bool:
        raise WireError("an array spec's key is a string, its tensor and inline flags booleans")
    kind = _DTYPES.get(dtype) if type(dtype) is str else None
    if kind is None:
        raise WireError(f"array {key!r}: dtype {str(dtype)[:40]!r} is not allowed; allowed: "
                        f"{', '.join(sorted(_DTYPES))}")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
            type(n) is int and 0 <= n <= MAX_ELEMENTS for n in shape):
        raise WireError(f"array {key!r}: a shape is a list of at most {MAX_DIMS} ints in "
                        f"0..{MAX_ELEMENTS}")
    if math.prod(shape) > MAX_ELEMENTS:
        raise WireError(f"array {key!r}: more than {MAX_ELEMENTS} elements")
    return key, kind, tuple(shape), is_tensor, small


def decode_body(
    descriptor: Mapping[str, Any], offset: int, head: bytes, frames: Sequence[Any]
) -> dict[str, Any]:
    """The payload of a decoded descriptor: inline arrays are read-only views of the head,
    large ones of their received frames. Small tensors are copied out of the head: a copy
    of a few KiB costs less than silencing torch's warning about a read-only buffer. Each
    array's shape times itemsize must be exactly the bytes that carry it, and the message
    must have exactly the frames its descriptor names."""
    payload: dict[str, Any] = dict(descriptor.get("meta", ()))
    plan = _PLANS.get(id(descriptor))
    if plan is None:
        plan = _validate(descriptor, _ANY_KEYS) if descriptor else _EMPTY_PLAN
    arrays, inline, large_count = plan
    if offset + inline != len(head) or large_count != len(frames):
        raise WireError(f"the message has {len(head) - offset} inline bytes and "
                        f"{len(frames)} array frame(s); its descriptor names {inline} and "
                        f"{large_count}")
    large = iter(frames)
    for key, kind, shape, is_tensor, small, span in arrays:
        if small:
            array = np.ndarray(shape, kind, head, offset)  # read-only: bytes are
            offset += span
            payload[key] = torch.from_numpy(array.copy()) if is_tensor else array
            continue
        frame = next(large)
        if len(frame) != span:
            raise WireError(f"array {key!r}: a frame of {len(frame)} bytes for {span}")
        array = np.frombuffer(frame, kind).reshape(shape)
        payload[key] = _tensor(array) if is_tensor else array
    return payload


def decode(
    head: bytes, frames: Sequence[Any], prefix: struct.Struct
) -> tuple[tuple[Any, ...], Mapping[str, Any], dict[str, Any]]:
    """A whole message checked and decoded: its prefix fields, descriptor and payload."""
    fields = read_head(head, prefix)
    descriptor, offset = read_descriptor(head, prefix)
    return fields, descriptor, decode_body(descriptor, offset, head, frames)


def _tensor(array: np.ndarray) -> torch.Tensor:
    # The frame is read-only; torch warns about that on every call, but we never write to it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)
