"""Where a rank incarnation's weights came from, as the sample ledger records it: a lineage
rule of the ledger's verdict needs it (rows a fresh or checkpoint start rolled back)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Origin:
    """How this rank incarnation got its weights: the sample ledger's `origin` and
    `resumed_from` (runtime.telemetry.ledger)."""

    kind: Literal["fresh", "checkpoint", "heal"]  # heal: from a live torchft peer
    step: int  # the step it started from: the checkpoint's or the peer's; 0 when fresh


def resumed(done: int) -> Origin:
    """The origin of a rank that resumed at step `done` (0: it started fresh)."""
    return Origin("checkpoint", done) if done else Origin("fresh", 0)
