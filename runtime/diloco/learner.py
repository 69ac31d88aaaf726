"""A learner's side of DiLoCo (seed §6): the hook the training loop calls after every step.

Each learner trains on its own for `inner_steps` (H) steps, then its rank 0 sends a snapshot
of the weights to the synchroniser and the merged weights come back; rank 0 shares them with
the learner's other ranks by a broadcast, so every rank of a data-parallel learner applies
the same update at the same step. Inner optimizer state stays local (as in DiLoCo).

* barrier mode: the learner waits for the merge and continues from the merged weights;
* decoupled mode: the learner keeps training while the round runs, checks after each step
  whether the merge has arrived and then applies it by the configured rule: `delta` adds the
  outer update (merged weights minus its snapshot) to the weights it has now, `replace`
  takes the merged weights. Before its next snapshot it waits for any merge still out.

A learner that gets no merge within `timeout_s` trains on from its own weights; the
synchroniser has dropped it from that round and answers its next snapshot with the current
shared weights (it rejoins). A disabled learner (`NoLearner`) does nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn

from runtime.diloco.config import DilocoConfig
from runtime.diloco.errors import DilocoError
from runtime.diloco.keys import ClientKeys, client_keys
from runtime.diloco.link import JOIN, LEAVE, SYNC, LearnerLink, Merged

log = logging.getLogger(__name__)
LEAVE_TIMEOUT_S = 10.0
MB = 1e6


class Learner(Protocol):
    """What the training loop calls; `join` once before the first step, `close` at the end."""

    def join(self) -> None: ...

    def after_step(self, step: int) -> None: ...

    def close(self) -> None: ...


class NoLearner:
    """The disabled form: not a DiLoCo learner."""

    def join(self) -> None:
        """Nothing to join."""

    def after_step(self, step: int) -> None:
        """Nothing to sync."""

    def close(self) -> None:
        """Nothing to leave."""


def learner_for(config: DilocoConfig | None, model: nn.Module, rank: int) -> Learner:
    """This rank's part in the experiment, or a no-op when the run is no learner."""
    if config is None or not config.enabled:
        return NoLearner()
    return DilocoLearner(config, model, rank)


@dataclass(frozen=True)
class SyncRecord:
    """One sync as rank 0 saw it."""

    step: int
    round: int  # the merges the weights now reflect
    sent: int  # bytes
    received: int  # bytes
    seconds: float  # how long training waited for it
    merged: bool  # False: no answer in time (trained on) or the snapshot was not merged


class DilocoLearner:
    """One rank of a learner."""

    def __init__(self, config: DilocoConfig, model: nn.Module, rank: int) -> None:
        assert config.endpoint is not None  # the config's validator makes sure
        self.config, self.rank = config, rank
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.link = LearnerLink(config.endpoint, config.learner, _keys(config)) \
            if rank == 0 else None
        self.round = 0
        self.snapshot: torch.Tensor | None = None  # decoupled: what the sync in flight sent
        self.in_flight: int | None = None  # decoupled: its request id (rank 0; -1 elsewhere)
        self.pending_step, self.pending_sent = 0, 0  # decoupled: its step, bytes sent before
        self.records: list[SyncRecord] = []

    # -- the hook ----------------------------------------------------------------------

    def join(self) -> None:
        """Start from the shared weights (the first learner to join provides them)."""
        merged = self._exchange(JOIN, self._flat(), self.config.timeout_s)
        if merged is None:
            raise DilocoError(f"learner {self.config.learner}: no answer from the synchroniser "
                              f"at {self.config.endpoint} in {self.config.timeout_s:g} s")
        self._load(merged)

    def after_step(self, step: int) -> None:
        if self.in_flight is not None:
            self._apply_if_arrived()
        if step % self.config.inner_steps:
            return
        started = time.perf_counter()
        if self.config.mode == "barrier":
            self._sync(step, started)
        else:
            self._send_snapshot(step, started)

    def close(self) -> None:
        """Leave the experiment (rank 0); a merge still in flight is not waited for."""
        if self.link is None:
            return
        try:
            rid = self.link.submit(LEAVE, self.round)
            self.link.wait(rid, LEAVE_TIMEOUT_S)
        finally:
            self.link.close()

    # -- barrier mode ------------------------------------------------------------------

    def _sync(self, step: int, started: float) -> None:
        sent = self._sent()
        merged = self._exchange(SYNC, self._flat(), self.config.timeout_s)
        if merged is not None:
            self._load(merged)
        self._record(step, merged, sent, started)

    # -- decoupled mode ----------------------------------------------------------------

    def _send_snapshot(self, step: int, started: float) -> None:
        if self.in_flight is not None:  # the previous merge first: one round in flight
            self._finish_in_flight(started)
        self.pending_step, self.pending_sent = step, self._sent()
        self.snapshot = self._flat()  # a new tensor: the weights move on, it stays
        self.in_flight = self.link.submit(SYNC, self.round, self.snapshot) if self.link else -1

    def _apply_if_arrived(self) -> None:
        merged = self.link.poll(self.in_flight) if self.link and self.in_flight else None
        if self._arrived(merged is not None):
            self._conclude(self._share(merged), time.perf_counter())

    def _finish_in_flight(self, started: float) -> None:
        waited = self.link.wait(self.in_flight, self.config.timeout_s) \
            if self.link and self.in_flight else None
        self._conclude(self._share(waited), started)

    def _conclude(self, merged: Merged | None, started: float) -> None:
        if merged is not None:
            self._apply(merged)
        self._record(self.pending_step, merged, self.pending_sent, started)
        self.in_flight, self.snapshot = None, None

    def _apply(self, merged: Merged) -> None:
        """The merge meets weights that moved on since the snapshot."""
        assert merged.weights is not None and self.snapshot is not None
        if merged.rejoined or self.config.merge == "replace":
            self._load(merged)
            return
        shared = merged.weights.to(self.snapshot.device)
        self._assign(self._flat() + (shared - self.snapshot))
        self.round = merged.round

    # -- weights and ranks -------------------------------------------------------------

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self.params])

    def _assign(self, flat: torch.Tensor) -> None:
        offset = 0
        with torch.no_grad():
            for param in self.params:
                count = param.numel()
                param.copy_(flat[offset:offset + count].view_as(param))
                offset += count

    def _load(self, merged: Merged) -> None:
        assert merged.weights is not None
        self._assign(merged.weights.to(self.params[0].device))
        self.round = merged.round

    def _exchange(self, method: str, weights: torch.Tensor, timeout_s: float) -> Merged | None:
        """Rank 0 asks and waits; every rank gets the answer (None: none in time)."""
        merged = None
        if self.link is not None:
            merged = self.link.wait(self.link.submit(method, self.round, weights), timeout_s)
        return self._share(merged)

    def _arrived(self, arrived: bool) -> bool:
        """Rank 0's `arrived`, agreed by every rank (a tiny broadcast per step while a
        decoupled merge is in flight)."""
        if self.world == 1:
            return arrived
        flag = torch.tensor([int(arrived)], device=self.params[0].device)
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    def _share(self, merged: Merged | None) -> Merged | None:
        """Rank 0's answer on every rank: round and flags, then the weights."""
        if self.world == 1:
            return merged
        device = self.params[0].device
        head = torch.tensor([-1, 0, 0] if merged is None else
                            [merged.round, int(merged.rejoined), merged.received], device=device)
        dist.broadcast(head, src=0)
        round_, rejoined, received = (int(v) for v in head.tolist())
        if round_ < 0:
            return None
        weights = merged.weights.to(device) if merged is not None and merged.weights is not None \
            else torch.empty(sum(p.numel() for p in self.params), dtype=self.params[0].dtype,
                             device=device)
        dist.broadcast(weights, src=0)
        return Merged(round_, weights, bool(rejoined), received)

    # -- reporting ---------------------------------------------------------------------

    def _sent(self) -> int:
        return self.link.sent if self.link is not None else 0

    def _record(self, step: int, merged: Merged | None, sent_before: int, started: float) -> None:
        if self.link is None:
            return
        ok = merged is not None and not merged.rejoined
        record = SyncRecord(step, self.round, self.link.sent - sent_before,
                            merged.received if merged else 0, time.perf_counter() - started, ok)
        self.records.append(record)
        _log(self.config, record, merged)


def _keys(config: DilocoConfig) -> ClientKeys | None:
    """The learner's CURVE keys (None: the plaintext link the config asked for by name)."""
    return client_keys(Path(config.keys), config.learner) if config.keys is not None else None


def _log(config: DilocoConfig, record: SyncRecord, merged: Merged | None) -> None:
    if merged is None:
        log.warning("diloco %s: step %d: no merge from the synchroniser in %g s; training on "
                    "from local weights (rejoining at the next sync)", config.learner,
                    record.step, config.timeout_s)
        return
    what = "merged" if record.merged else "not merged (rejoined with the shared weights)"
    log.info("diloco %s: step %d round %d %s: sent %.2f MB, received %.2f MB, waited %.3f s",
             config.learner, record.step, record.round, what, record.sent / MB,
             record.received / MB, record.seconds)
