"""Targets for the hostile-wire tests, each in a process of its own, so that a crash (a
SIGSEGV from bytes mapped as object pointers) fails the test instead of ending pytest.

`python -m tests.runtime_train.wire_target decode` reads messages from stdin (a frame count,
then each frame's length and bytes, as little-endian uint32) and runs every reader of the
wire on each: the aux request and reply decoders, DiLoCo's request and reply readers and
the refresh manifest reader; it writes one line per message with the name of what each
raised ("ok" when it decoded), after touching every decoded array's memory.

`python -m tests.runtime_train.wire_target serve DIR` runs a real proxy and worker (echo
service) on loopback TCP and IPC under DIR, prints the proxy's address, and serves until
stdin closes; each line on stdin, and the close, print the worker's malformed count and
health as JSON.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.aux.errors import WireError
from runtime.aux.proxy import ProxyCore
from runtime.aux.refresh import read_manifest
from runtime.aux.services import EchoService
from runtime.aux.wire import REPLY, REQUEST, decode
from runtime.aux.worker import WorkerCore
from runtime.diloco.errors import DilocoError
from runtime.diloco.link import _merged, read_request

_U32 = struct.Struct("<I")


def _read_exact(count: int) -> bytes:
    data = sys.stdin.buffer.read(count)
    if len(data) != count:
        raise EOFError
    return data


def _read_message() -> list[bytes]:
    (frames,) = _U32.unpack(_read_exact(4))
    return [_read_exact(_U32.unpack(_read_exact(4))[0]) for _ in range(frames)]


def _touch(value: Any) -> None:
    """Read every byte of a decoded array, as a service would."""
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        bytes(value.tobytes())


def _outcome(read: Any, message: list[bytes]) -> str:
    try:
        result = read(message)
    except (WireError, DilocoError) as error:
        return type(error).__name__
    except Exception as error:  # an untyped failure: the test names it
        return f"untyped {type(error).__name__}: {error}"
    for value in (result.values() if isinstance(result, dict) else [result]):
        _touch(value)
    return "ok"


def _readers() -> list[Any]:
    return [
        lambda m: decode(m[0], m[1:], REQUEST)[2],
        lambda m: decode(m[0], m[1:], REPLY)[2],
        lambda m: vars(read_request(b"peer", m[0], m[1:])).get("weights"),
        lambda m: _merged(m).weights,
        lambda m: read_manifest(m[0]),
    ]


def decode_forever() -> None:
    readers = _readers()
    while True:
        try:
            message = _read_message()
        except EOFError:
            return
        if not message:
            message = [b""]
        print(json.dumps([_outcome(read, message) for read in readers]), flush=True)


def serve(folder: Path) -> None:
    proxy = ProxyCore("echo", "p", "127.0.0.1", f"ipc://{folder}/proxy.sock")
    worker = WorkerCore("echo", "w0", proxy.backend_address, EchoService(), queue_size=8,
                        queue_total=16)
    threads = [proxy.start_thread(), worker.start_thread()]
    print(proxy.address, flush=True)
    for _ in sys.stdin:  # each line asks for the worker's report; serves until stdin closes
        print(json.dumps({"malformed": worker.malformed, "healthy": worker.healthy}), flush=True)
    proxy.stop.set()
    worker.stop.set()
    for thread in threads:
        thread.join(30)
    print(json.dumps({"malformed": worker.malformed, "healthy": worker.healthy}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "decode":
        decode_forever()
    else:
        serve(Path(sys.argv[2]))
