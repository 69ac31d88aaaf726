"""The gate's plain data: how the pods' ranks meet, what each pod runs and finds, and the
`Pods` seam the gate reaches them through (runtime.preflight.placement: Ray actors; tests:
local processes). Pydantic and the standard library only: the gate decides and reports
without importing torch or Ray."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from runtime.errors import RuntimeFailure
from runtime.preflight.config import PreflightConfig
from runtime.preflight.result import PreflightResult

Backend = Literal["nccl", "gloo"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class Rendezvous(_Model):
    """Where and how the pods' ranks meet; the same for every pod of one attempt."""

    master: str
    """Address of pod 0, where the TCP store listens."""
    port: int = Field(ge=1, le=65535)
    """Port of the TCP store on pod 0."""
    pods: int = Field(ge=1)
    """Pods taking part."""
    ranks_per_pod: int = Field(ge=1)
    """Ranks in each pod: its GPUs, or 1 in a CPU-only pod."""
    backend: Backend
    """nccl on GPU pods, gloo otherwise."""
    mib: float = Field(gt=0)
    """All-reduce buffer, MiB."""
    iterations: int = Field(ge=1)
    """Timed all-reduces after the warm-up."""
    timeout_s: float = Field(gt=0)
    """How long a rank waits for its peers (the rendezvous, each collective)."""
    min_busbw_gbps: float | None = None
    """Below this bus bandwidth, the pairs are measured too."""

    @property
    def world(self) -> int:
        return self.pods * self.ranks_per_pod


class RankReport(_Model):
    """What the ranks of one pod measured (the slowest of them, where they differ)."""

    exact: bool
    """The all-reduce gave the known sum."""
    busbw_gbps: float | None
    """Bus bandwidth over every pod, GB/s; None for a single rank (nothing crosses a link)."""
    pairs: dict[str, float] = Field(default_factory=dict)
    """Bus bandwidth of each ring pair this pod is in ("2-3"), GB/s, when they were measured."""


class PodTask(_Model):
    """What one pod runs in one attempt."""

    index: int
    """The pod's place in the all-reduce (0 hosts the rendezvous)."""
    node: str
    """Its Kubernetes node, reported in its result."""
    pod: str
    """Its name."""
    checks: PreflightConfig
    """Its own checks (the collective among its own GPUs is part of the all-reduce)."""
    rendezvous: Rendezvous
    """The all-reduce between pods."""


class PodOutcome(_Model):
    """What one pod found."""

    index: int
    """As in its task."""
    node: str
    """As in its task."""
    pod: str
    """As in its task."""
    local: PreflightResult
    """Its own checks."""
    ranks: RankReport | None = None
    """Its ranks' figures; None when they failed."""
    error: str | None = None
    """Why its ranks failed."""
    own_fault: bool = False
    """The failure was this pod's own (its GPUs, an injected fault), not a lost peer."""


class PodsMissing(RuntimeFailure):
    """Fewer worker pods than the job asked for joined in time."""


@dataclass(frozen=True)
class PodSlot:
    """One worker pod as the gate addresses it."""

    node: str  # Kubernetes node
    pod: str  # pod name
    address: str  # its IP, where pod 0 hosts the rendezvous
    key: str  # how the placement finds it again (a Ray node id)


class Pods(Protocol):
    """The job's worker pods, and a way to run a task in each at once."""

    def wait(self, count: int, timeout_s: float, avoid: set[str]) -> list[PodSlot]:
        """`count` pods, none named in `avoid`, once they have joined; PodsMissing after
        `timeout_s`."""
        ...

    def free_port(self, slot: PodSlot) -> int:
        """A free TCP port in that pod."""
        ...

    def run(self, tasks: list[PodTask], slots: list[PodSlot],
            timeout_s: float) -> list[PodOutcome | None]:
        """Each task in its pod at once; None for a pod that gave no answer in time."""
        ...
