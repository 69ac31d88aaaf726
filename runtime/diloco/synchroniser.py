"""The DiLoCo synchroniser (seed §6.1): one process per experiment, which the learners dial.

Every `inner_steps` steps each learner sends a snapshot of its weights. A round gathers them
and closes when every member learner has sent one, or `round_timeout_s` after the first one
arrived; a member still missing then is dropped. The merge takes the mean of the snapshots,
sets the pseudo-gradient (shared weights minus that mean) and steps the outer optimizer
(`runtime.diloco.outer`); every contributor gets the new shared weights back.

A learner that joins, or that sends a snapshot the round cannot use (it was dropped, or the
synchroniser restarted from a checkpoint meanwhile), is answered at once with the current
shared weights and becomes a member of the open round, so it contributes from its next
snapshot on. A learner that finishes says so (`leave`); the synchroniser stops when every
learner has left, after saving the outer state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import zmq

from runtime.aux.errors import WireError
from runtime.diloco.config import SynchroniserConfig
from runtime.diloco.errors import DilocoError
from runtime.diloco.keys import server_keys
from runtime.diloco.link import (
    JOIN,
    LEAVE,
    SYNC,
    Request,
    read_request,
    send_merged,
    send_refusal,
)
from runtime.diloco.outer import OuterState, OuterStore
from runtime.diloco.secure import ServerLink

log = logging.getLogger(__name__)
IDLE_POLL_S = 1.0
MB = 1e6


@dataclass(frozen=True)
class RoundRecord:
    """What one merge moved and took: the figures `benchmarks/diloco.py` reports."""

    round: int
    learners: tuple[str, ...]  # whose snapshots were merged
    dropped: tuple[str, ...]  # members that missed the round
    received: int  # snapshot bytes in
    sent: int  # merged-weight bytes out
    seconds: float  # first snapshot in to last reply out

    def line(self) -> str:
        dropped = f", dropped {', '.join(self.dropped)}" if self.dropped else ""
        return (f"round {self.round}: merged {len(self.learners)} learners "
                f"({', '.join(self.learners)}){dropped}; {self.received / MB:.2f} MB in, "
                f"{self.sent / MB:.2f} MB out, {self.seconds:.3f} s")


@dataclass
class _Round:
    """Snapshots gathered towards the next merge (a running sum, not one copy each)."""

    started: float | None = None
    total: torch.Tensor | None = None
    waiting: list[Request] = field(default_factory=list)
    received: int = 0

    @property
    def contributors(self) -> set[str]:
        return {request.learner for request in self.waiting}

    def add(self, request: Request, now: float) -> None:
        assert request.weights is not None
        snapshot = request.weights.to(torch.float32)  # bf16 weights would lose the sum
        self.total = snapshot.clone() if self.total is None else self.total.add_(snapshot)
        self.started = now if self.started is None else self.started
        self.waiting.append(request)
        self.received += request.received


class Synchroniser:
    """Serves one experiment's learners until every one has left."""

    def __init__(self, config: SynchroniserConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.clock = config, clock
        self.state = OuterState(config.outer)
        self.store = OuterStore(config.checkpoint, config.keep_last) if config.checkpoint \
            else None
        if self.store is not None:
            self.store.restore(self.state)
        self.members: set[str] = set()
        self.seen: set[str] = set()  # every learner that ever joined
        self.left: set[str] = set()
        self.round = _Round()
        self.records: list[RoundRecord] = []
        keys = server_keys(Path(config.keys), config.learners) if config.keys else None
        self.link = ServerLink(keys)
        self.sock = self.link.sock
        self.impostors = 0  # requests whose claimed learner is not the key's: refused
        self.last_message = clock()
        self.malformed = 0  # messages dropped because the decoder refused them

    def bind(self) -> str:
        """Listen; returns the address, with the port picked when the config said `*`."""
        self.sock.bind(self.config.bind)
        return str(self.sock.getsockopt_string(zmq.LAST_ENDPOINT))

    def serve(self) -> list[RoundRecord]:
        """Answer learners until all have left; raises DilocoError after `idle_timeout_s`
        without a message while no learner is a member."""
        try:
            while not self._finished():
                if self.sock.poll(int(self._wait_s() * 1000), zmq.POLLIN):
                    for peer, (client, head, *frames) in self.link.drain(ready=True):
                        self._receive(client, head, frames, peer)
                if self._due():
                    self._merge()
            return self.records
        finally:
            self.link.close()

    def _finished(self) -> bool:
        if not self.members and self.left and set(self.config.learners) <= self.left:
            return True  # every learner that came (and every expected one) is done
        idle = self.clock() - self.last_message
        if not self.members and idle > self.config.idle_timeout_s:
            raise DilocoError(f"no learner of {self.config.run} for {idle:.0f} s; stopping "
                              f"after round {self.state.round}")
        return False

    def _wait_s(self) -> float:
        if self.round.started is None:
            return IDLE_POLL_S
        deadline = self.round.started + self.config.round_timeout_s
        return min(IDLE_POLL_S, max(0.0, deadline - self.clock()))

    def _due(self) -> bool:
        started = self.round.started
        if started is None:
            return False
        # The first round also waits for expected learners that have not come yet (they
        # start in any order); later rounds wait for members only, and one that never came
        # joins when it comes.
        late = set(self.config.learners) - self.seen - self.left if not self.records else set()
        awaited = self.members | late
        complete = awaited <= self.round.contributors
        return complete or self.clock() - started >= self.config.round_timeout_s

    def _receive(self, client: bytes, head: bytes, frames: list[Any],
                 peer: str | None = None) -> None:
        """Handle one message; one the decoder refuses (runtime.aux.wire and
        runtime.diloco.fields check every byte and field before use) is dropped, logged
        with the peer's routing identity and counted, and serving goes on."""
        try:
            request = read_request(client, head, frames)
        except WireError as error:
            self.malformed += 1
            log.warning("%s: dropped a malformed message from peer %s (%d so far): %s",
                        self.config.run, client.hex(), self.malformed, error)
            return
        if peer is not None and request.learner != peer:
            self._impostor(request, peer)
            return
        self._handle(request)

    def _impostor(self, request: Request, peer: str) -> None:
        """A learner's key sent a request in another learner's name: nothing of it is used,
        and the answer carries no weights (CURVE binds each name to its key: secure.py)."""
        self.impostors += 1
        log.warning("%s: refused %s from the key of %r, which claimed to be %r (%d so far)",
                    self.config.run, request.method, peer, request.learner, self.impostors)
        send_refusal(self.sock, request, f"this key belongs to learner {peer!r}, not "
                                         f"{request.learner!r}")

    def _handle(self, request: Request) -> None:
        self.last_message = self.clock()
        refusal = self._refusal(request)
        if refusal is not None:
            log.warning("refused %s from %r: %s", request.method, request.learner, refusal)
            send_refusal(self.sock, request, refusal)
        elif request.method == LEAVE:
            self._leave(request)
        elif request.method == SYNC and self._usable(request):
            self.round.add(request, self.clock())
        else:
            self._admit(request)

    def _refusal(self, request: Request) -> str | None:
        expected = self.config.learners
        if request.method not in (JOIN, SYNC, LEAVE):
            return f"unknown request {request.method!r}"
        if expected and request.learner not in expected:
            return (f"{request.learner!r} is not a learner of {self.config.run}: "
                    f"{', '.join(expected)}")
        if request.method == LEAVE:
            return None
        if request.weights is None:
            return f"a {request.method} carries the learner's weights"
        params = self.state.params
        if params is not None and request.weights.shape != params.shape:
            return (f"{request.learner!r} sent {request.weights.numel()} parameters; the "
                    f"experiment's model has {params.numel()}")
        return None

    def _usable(self, request: Request) -> bool:
        """A snapshot the open round can merge: from a member, taken from the current
        shared weights, and its first in this round."""
        return (request.learner in self.members and request.round == self.state.round
                and request.learner not in self.round.contributors)

    def _admit(self, request: Request) -> None:
        """A join, or a snapshot that cannot be merged: answer with the shared weights; the
        learner is a member from now on (the first learner's weights start the experiment)."""
        if self.state.params is None:
            assert request.weights is not None
            self.state.adopt(request.weights)
            log.info("%s: shared weights taken from %s (%d parameters)", self.config.run,
                     request.learner, request.weights.numel())
        if request.learner not in self.members:
            log.info("%s: %s joins at round %d", self.config.run, request.learner,
                     self.state.round)
        self.members.add(request.learner)
        self.seen.add(request.learner)
        self.left.discard(request.learner)
        send_merged(self.sock, request, self.state.round, self.state.weights, rejoined=True)

    def _leave(self, request: Request) -> None:
        log.info("%s: %s leaves after round %d", self.config.run, request.learner,
                 self.state.round)
        self.members.discard(request.learner)
        self.left.add(request.learner)
        send_merged(self.sock, request, self.state.round, None)

    def _merge(self) -> None:
        gathered, self.round = self.round, _Round()
        assert gathered.total is not None and gathered.started is not None
        count = len(gathered.waiting)
        self.state.step((gathered.total / count).to(self.state.weights.dtype))
        sent = sum(send_merged(self.sock, request, self.state.round, self.state.weights)
                   for request in gathered.waiting)
        merged = sorted(gathered.contributors)
        dropped = sorted(self.members - gathered.contributors)
        self.members -= set(dropped)
        record = RoundRecord(self.state.round, tuple(merged), tuple(dropped), gathered.received,
                             sent, self.clock() - gathered.started)
        self.records.append(record)
        log.info("%s: %s", self.config.run, record.line())
        if self.store is not None:
            self.store.save(self.state)
