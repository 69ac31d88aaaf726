"""Weight refresh (seed §5.2: "direct NCCL refreshes between training and auxiliary workers"):
training pushes its current weights, or a named subset, to every worker of a service.

Each worker joins through a torch.distributed TCPStore that the run's coordinator hosts (the
control plane) and gets a two-member process group with the publishing training rank (the
data plane): ProcessGroupNCCL when the service runs on GPUs, ProcessGroupGloo otherwise, with
the same code. A refresh is one broadcast of a header (version, manifest size), the manifest
(names, dtypes, shapes), then one flat buffer per dtype; the publisher sends to all workers
at once and drops a worker whose group fails (it joins again when it restarts).

Versions are the store's counter, so they only grow. A version is complete before anyone
sees it: the publisher sends a snapshot copied at `publish`, and the worker stages what it
receives and swaps it in between two requests (runtime.aux.worker), so a request is served
wholly by one version. A request may ask for a minimum version; a worker that is behind
answers STALE and the client sends the request again, which the proxy hands to the next
worker. A worker that starts while versions exist (a restart) takes the newest one as its
minimum, and the publisher sends the newest version to every worker that joins: so a
restarted worker serves nothing older than what was published before it came back.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, cast, runtime_checkable

import torch
import torch.distributed as dist

from runtime.aux.errors import AuxError, WireError
from runtime.aux.wire import MAX_ARRAYS, MAX_DIMS, MAX_ELEMENTS, parse_json

log = logging.getLogger(__name__)

# A broken group (a worker or the trainer died) fails its collectives after this long; both
# sides then start over. Generous: a refresh of a large model over a busy network is slow.
GROUP_TIMEOUT = timedelta(seconds=120)
STORE_TIMEOUT = timedelta(seconds=60)
# The publisher sends an empty header this often, so that a worker's wait for the next
# version never reaches GROUP_TIMEOUT and a dead worker is noticed between refreshes.
KEEPALIVE_S = 20.0
POLL_S = 0.1  # how often the publisher looks for joining workers, and a worker for its answer
_VERSION, _JOINS = "version", "joins"


class Group(Protocol):
    """What a refresh needs of a process group (ProcessGroupGloo and ProcessGroupNCCL are
    backends, not ProcessGroup subclasses, but both have this)."""

    def broadcast(self, tensors: list[torch.Tensor], opts: dist.BroadcastOptions) -> Any:
        """Start a broadcast; returns its Work."""


class RefreshError(AuxError):
    """A weight refresh could not be set up or sent."""


@runtime_checkable
class RefreshableService(Protocol):
    """A service whose weights training refreshes. `load_weights` is called by the worker's
    serving thread between two requests; keep the tensors (they are fresh copies) or copy
    them in, but finish before returning: the next request expects the new version."""

    def load_weights(self, tensors: dict[str, torch.Tensor], version: int) -> None:
        """Use `tensors` (by name) from the next request on."""


@dataclass(frozen=True)
class RefreshPoint:
    """Where one service's refreshes meet: the store's address, the service's namespace in
    it, and the collective backend (gloo or nccl). Small and picklable."""

    host: str
    port: int
    namespace: str
    backend: str


class RefreshHub:
    """The run's rendezvous store, hosted by the coordinator's process for its lifetime."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                   timeout=STORE_TIMEOUT)

    def point(self, service: str, backend: str) -> RefreshPoint:
        return RefreshPoint(self.host, self.store.port, f"gkr-refresh/{service}", backend)


def connect(point: RefreshPoint) -> dist.Store:
    """A client of the point's store, seeing only the service's namespace."""
    store = dist.TCPStore(point.host, point.port, is_master=False, timeout=STORE_TIMEOUT)
    return dist.PrefixStore(point.namespace, store)


def device_for(backend: str) -> torch.device:
    """Where refreshed tensors live: NCCL moves CUDA memory, gloo host memory."""
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else (
        torch.device("cpu"))


def pair_group(backend: str, store: dist.Store, rank: int) -> Group:
    """The two-member group of a publisher (rank 0) and one worker (rank 1)."""
    if backend == "gloo":
        return cast(Group, dist.ProcessGroupGloo(store, rank, 2, GROUP_TIMEOUT))
    nccl: Any = getattr(dist, "ProcessGroupNCCL", None)
    if backend != "nccl" or nccl is None:
        raise RefreshError(f"weight refresh backend {backend!r} is not available here")
    options = nccl.Options()
    options._timeout = GROUP_TIMEOUT
    return nccl(store, rank, 2, options)


def _start_broadcast(group: Group, tensors: list[torch.Tensor]) -> list[Any]:
    """Start broadcasting `tensors` from rank 0, in order; the Works to wait on."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    return [group.broadcast([tensor], options) for tensor in tensors]


def _broadcast(group: Group, tensors: list[torch.Tensor]) -> None:
    for work in _start_broadcast(group, tensors):
        work.wait()


MAX_MANIFEST = 16 << 20  # bytes of one version's manifest
# The dtypes a refresh may carry, by the names Snapshot.of writes.
_TORCH_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
    torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)}


def read_manifest(manifest: bytes) -> tuple[list[torch.dtype], list[int]]:
    """A version's buffer dtypes and sizes, after checking the whole manifest: known dtypes
    only, sizes and shapes of bounded non-negative ints, every entry inside its buffer (so
    that Snapshot.tensors cannot fail on it). Raises WireError."""
    layout = parse_json(manifest)
    dtypes, sizes, entries = layout.get("dtypes"), layout.get("sizes"), layout.get("entries")
    if not isinstance(dtypes, list) or not isinstance(sizes, list) \
            or not isinstance(entries, list) or len(dtypes) != len(sizes) \
            or len(dtypes) > MAX_ARRAYS:
        raise WireError("a refresh manifest holds 'dtypes' and 'sizes' of one length (at most "
                        f"{MAX_ARRAYS}) and 'entries'")
    if not all(type(d) is str and d in _TORCH_DTYPES for d in dtypes):
        raise WireError(f"a refresh manifest's dtypes must be among {sorted(_TORCH_DTYPES)}")
    if not all(_count(n) for n in sizes):
        raise WireError(f"a refresh manifest's sizes must be ints in 0..{MAX_ELEMENTS}")
    for entry in entries:
        _check_entry(entry, sizes)
    return [_TORCH_DTYPES[d] for d in dtypes], sizes


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value <= MAX_ELEMENTS


def _check_entry(entry: Any, sizes: list[int]) -> None:
    if not isinstance(entry, list) or len(entry) != 4:
        raise WireError("a refresh manifest entry is [name, buffer, offset, shape]")
    name, index, offset, shape = entry
    if type(name) is not str or type(index) is not int or not 0 <= index < len(sizes) \
            or not _count(offset) or not isinstance(shape, list) or len(shape) > MAX_DIMS \
            or not all(_count(n) for n in shape):
        raise WireError(f"refresh manifest entry {str(name)[:60]!r}: a name, a buffer index "
                        f"below {len(sizes)}, an offset and a shape of bounded ints")
    if offset + math.prod(shape) > sizes[index]:
        raise WireError(f"refresh manifest entry {name!r} ends past its buffer of "
                        f"{sizes[index]} elements")


@dataclass(frozen=True)
class Snapshot:
    """One version: a manifest and the flat buffers (one per dtype) it describes."""

    version: int
    manifest: bytes
    buffers: list[torch.Tensor]

    @classmethod
    def of(cls, version: int, tensors: Mapping[str, torch.Tensor], device: torch.device
           ) -> Snapshot:
        """Copy `tensors` into flat buffers on `device`: the copy is the snapshot."""
        by_dtype: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
        for name, tensor in tensors.items():
            by_dtype.setdefault(tensor.dtype, []).append((name, tensor.detach()))
        entries, buffers = [], []
        for index, (dtype, named) in enumerate(by_dtype.items()):
            flat = [t.reshape(-1).to(device) for _, t in named]
            buffers.append(torch.cat(flat) if flat else torch.empty(0, dtype=dtype))
            offset = 0
            for name, tensor in named:
                entries.append([name, index, offset, list(tensor.shape)])
                offset += tensor.numel()
        dtypes = [str(dtype).removeprefix("torch.") for dtype in by_dtype]
        manifest = json.dumps({"dtypes": dtypes, "sizes": [b.numel() for b in buffers],
                               "entries": entries}).encode()
        return cls(version, manifest, buffers)

    def header(self, device: torch.device) -> list[torch.Tensor]:
        return [torch.tensor([self.version, len(self.manifest)], dtype=torch.int64,
                             device=device),
                torch.frombuffer(bytearray(self.manifest), dtype=torch.uint8).to(device)]

    def tensors(self) -> dict[str, torch.Tensor]:
        """Views into the buffers, by name."""
        entries = json.loads(self.manifest)["entries"]
        out = {}
        for name, index, offset, shape in entries:
            count = int(torch.Size(shape).numel())
            out[name] = self.buffers[index][offset:offset + count].view(shape)
        return out


class WeightPublisher:
    """Training's side: sends versions to every worker of one service, and the newest to
    each worker that joins later (a restart)."""

    def __init__(self, point: RefreshPoint, device: torch.device | None = None) -> None:
        self.point, self.store = point, connect(point)
        self.device = device or device_for(point.backend)
        self.workers: dict[str, Group] = {}  # joined workers' groups
        self.latest: Snapshot | None = None
        self._lock = threading.Lock()  # one sender on a group at a time
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="refresh-joins", daemon=True)
        self._watcher.start()

    def publish(self, tensors: Mapping[str, torch.Tensor]) -> int:
        """Snapshot `tensors` now and send them to every worker; the new version. Training
        may change its tensors as soon as this returns."""
        version = self.store.add(_VERSION, 1)
        snapshot = Snapshot.of(version, tensors, self.device)
        with self._lock:
            self.latest = snapshot
            self._send_all(snapshot)
        return version

    def _send_all(self, snapshot: Snapshot | None) -> None:
        """Send to every worker at once (a group's collectives run in order on its own
        threads); drop the workers whose group failed: they join again when they restart."""
        started: dict[str, list[Any]] = {}
        failed: list[tuple[str, RuntimeError]] = []
        for worker, group in self.workers.items():
            try:
                started[worker] = self._start(group, snapshot)
            except RuntimeError as error:
                failed.append((worker, error))
        for worker, works in started.items():
            try:
                for work in works:
                    work.wait()
            except RuntimeError as error:
                failed.append((worker, error))
        for worker, cause in failed:
            log.warning("refresh of %s to %s failed: %s", self.point.namespace, worker, cause)
            del self.workers[worker]

    def _start(self, group: Group, snapshot: Snapshot | None) -> list[Any]:
        if snapshot is None:  # keepalive: version 0, nothing follows
            return _start_broadcast(group, [torch.zeros(2, dtype=torch.int64,
                                                        device=self.device)])
        return _start_broadcast(group, [*snapshot.header(self.device), *snapshot.buffers])

    def _watch(self) -> None:
        """Accept joining workers (each in a thread of its own: a group forms only when both
        sides arrive) and keep every group alive between refreshes."""
        next_keepalive = time.monotonic() + KEEPALIVE_S
        while not self._stop.wait(POLL_S):
            while self.store.queue_len(_JOINS):
                ticket = self.store.queue_pop(_JOINS, block=False).decode()
                threading.Thread(target=self._accept, args=(ticket,), daemon=True).start()
            if time.monotonic() >= next_keepalive:
                next_keepalive = time.monotonic() + KEEPALIVE_S
                with self._lock:
                    self._send_all(None)

    def _accept(self, ticket: str) -> None:
        # A connection of its own: forming a group blocks its store connection until the
        # worker arrives, and the watcher and other joins must not wait behind it.
        store = connect(self.point)
        store.set(f"accept/{ticket}", "1")
        try:
            group = pair_group(self.point.backend, dist.PrefixStore(f"pair/{ticket}", store), 0)
        except RuntimeError as error:  # it left before we came
            log.warning("worker %s did not form its refresh group: %s", ticket, error)
            return
        with self._lock:
            try:
                if self.latest is not None:
                    for work in self._start(group, self.latest):
                        work.wait()
            except RuntimeError as error:
                log.warning("first refresh of %s failed: %s", ticket, error)
                return
            self.workers[ticket] = group

    def close(self) -> None:
        self._stop.set()
        self._watcher.join(timeout=5)


class WeightSubscriber:
    """An auxiliary worker's side: joins the service's refreshes on a thread of its own and
    stages each version it receives, for the serving thread to take between requests."""

    def __init__(self, point: RefreshPoint, label: str) -> None:
        self.point, self.label = point, label
        self.store = connect(point)
        # A worker starting while versions exist (a restart) must not serve older weights.
        self.floor = self.store.add(_VERSION, 0)
        self._staged: tuple[int, dict[str, torch.Tensor]] | None = None
        self.malformed = 0  # versions dropped because their manifest was refused
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"refresh-{label}", daemon=True)
        self._thread.start()

    def take(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """The newest version received and not yet taken (one reference swap: atomic)."""
        staged, self._staged = self._staged, None
        return staged

    def _run(self) -> None:
        device = self._device()
        while not self._stop.is_set():
            group = self._join()
            if group is None:
                return
            try:
                self._receive(group, device)
            except WireError as error:  # not what a publisher sends: drop the group
                self.malformed += 1
                log.warning("refresh of %s: dropped a malformed version (%s); joining again",
                            self.label, error)
            except RuntimeError as error:  # the publisher left or failed: join again
                log.warning("refresh group of %s broke (%s); joining again", self.label, error)

    def _device(self) -> torch.device:
        if self.point.backend == "nccl":
            torch.cuda.set_device(0)  # Ray gives the worker its GPU as device 0
        return device_for(self.point.backend)

    def _join(self) -> Group | None:
        """Queue a join ticket, wait for a publisher to accept it, then form the group."""
        ticket = f"{self.label}-{uuid.uuid4().hex[:12]}"
        self.store.queue_push(_JOINS, ticket)
        while not self.store.check([f"accept/{ticket}"]):
            if self._stop.wait(POLL_S):
                return None
        return pair_group(self.point.backend, dist.PrefixStore(f"pair/{ticket}", self.store), 1)

    def _receive(self, group: Group, device: torch.device) -> None:
        while not self._stop.is_set():
            header = torch.zeros(2, dtype=torch.int64, device=device)
            _broadcast(group, [header])
            version, size = (int(x) for x in header.tolist())
            if version == 0:
                continue  # keepalive
            if not 0 < size <= MAX_MANIFEST or version < 0:
                raise WireError(f"a refresh header of version {version} announces a manifest "
                                f"of {size} bytes; allowed: 1..{MAX_MANIFEST}")
            text = torch.empty(size, dtype=torch.uint8, device=device)
            _broadcast(group, [text])
            manifest = bytes(text.cpu().numpy())
            dtypes, sizes = read_manifest(manifest)
            buffers = [torch.empty(n, dtype=d, device=device) for d, n in zip(dtypes, sizes,
                                                                              strict=True)]
            _broadcast(group, buffers)
            self._staged = (version, Snapshot(version, manifest, buffers).tensors())

    def close(self) -> None:
        self._stop.set()
