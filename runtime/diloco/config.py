"""Settings of a DiLoCo experiment (seed §6): a learner's `diloco` section of its training
config, and the synchroniser's settings.

Both can come from the deployment: `gkr render` gives every learner pod and the synchroniser's
pod one JSON document in the `GKR_DILOCO` variable (`runtime.identity.Env.DILOCO`), and
`gkr run --local --diloco` does the same for local processes. `with_deployment` lays a
learner's document over its composed training config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.errors import ConfigError
from runtime.identity import Env

LEARNER_NAME = r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$"
ENDPOINT = r"^tcp://\S+:(\d+|\*)$"
KEY_DIR = "/etc/gkr/diloco-keys"  # where rendered pods mount their CURVE keys' Secret


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class OuterOptimizer(_Section):
    """The synchroniser's optimizer over the averaged pseudo-gradients: torch.optim.SGD, as
    torchft's DiLoCo uses. The defaults are the DiLoCo paper's (Douillard et al. 2023, §3:
    Nesterov momentum, outer learning rate 0.7, momentum 0.9)."""

    lr: float = Field(0.7, gt=0)
    """Outer learning rate; 1 without momentum makes the merge a plain average of weights."""
    momentum: float = Field(0.9, ge=0, lt=1)
    """Momentum of the outer SGD."""
    nesterov: bool = True
    """Nesterov momentum (needs momentum > 0)."""

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> OuterOptimizer:
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov needs momentum > 0 (set nesterov: false for plain SGD)")
        return self


Mode = Literal["barrier", "decoupled"]
Merge = Literal["delta", "replace"]


class DilocoConfig(_Section):
    """This training run as one learner of a DiLoCo experiment (the `diloco` section)."""

    enabled: bool = False
    """Train as a DiLoCo learner: sync with the synchroniser every `inner_steps` steps."""
    endpoint: str | None = Field(None, pattern=ENDPOINT)
    """The synchroniser, `tcp://host:port`."""
    learner: str = Field("learner-0", pattern=LEARNER_NAME)
    """This learner's name, unique within the experiment."""
    index: int = Field(0, ge=0)
    """This learner's position among the experiment's learners: which data shard it reads."""
    learners: int = Field(1, ge=1)
    """How many learners share the data."""
    inner_steps: int = Field(100, ge=1)
    """H: optimizer steps between two syncs."""
    mode: Mode = "barrier"
    """barrier: wait for the merge; decoupled: keep training and apply it when it arrives."""
    merge: Merge = "delta"
    """Decoupled mode, for weights that moved on since the snapshot: `delta` adds the outer
    update (merged weights minus the snapshot) to them, `replace` takes the merged weights."""
    outer: OuterOptimizer = Field(default_factory=OuterOptimizer)
    """The outer optimizer (read by the synchroniser; local runs start it from here)."""
    round_timeout_s: float = Field(300.0, gt=0)
    """How long the synchroniser waits for a round's missing learners before dropping them."""
    timeout_s: float = Field(900.0, gt=0)
    """How long a learner waits for a merge; then it trains on and rejoins at the next sync."""
    keys: str | None = None
    """Folder of this learner's CURVE keys (runtime.diloco.keys): its secret key and the
    synchroniser's public key. The rendered pods mount them from the Secret `gkr diloco keys`
    makes; a local run makes its own."""
    plaintext: bool = False
    """No keys: the link is neither encrypted nor authenticated (tests and benchmarks on
    loopback only)."""

    @model_validator(mode="after")
    def _consistent(self) -> DilocoConfig:
        if self.enabled and self.endpoint is None:
            raise ValueError("an enabled learner needs endpoint: tcp://HOST:PORT")
        if self.enabled:
            _keys_or_plaintext(self.keys, self.plaintext)
        if self.index >= self.learners:
            raise ValueError(f"index {self.index} is not below learners ({self.learners})")
        if self.timeout_s <= self.round_timeout_s:
            raise ValueError(f"timeout_s ({self.timeout_s:g}) must exceed round_timeout_s "
                             f"({self.round_timeout_s:g}): a learner outwaits a round")
        return self


class SynchroniserConfig(_Section):
    """The synchroniser: where it listens, whom it waits for, how it merges, where it saves."""

    bind: str = Field("tcp://*:5555", pattern=ENDPOINT)
    """ZeroMQ address to listen on; port `*` picks a free one (printed at start)."""
    run: str = "diloco"
    """The experiment's run name, for log lines and checkpoints."""
    learners: tuple[str, ...] = ()
    """Expected learner names: a round waits for those not joined yet; empty: anyone."""
    outer: OuterOptimizer = Field(default_factory=OuterOptimizer)
    """The outer optimizer."""
    round_timeout_s: float = Field(300.0, gt=0)
    """A round closes this long after its first snapshot, without the missing learners."""
    idle_timeout_s: float = Field(3600.0, gt=0)
    """With no learner left, give up after this long without a message."""
    checkpoint: str | None = None
    """Folder or fsspec URI for the outer state (saved after every round); None: not saved."""
    keep_last: int = Field(2, ge=1)
    """Outer checkpoints kept."""
    keys: str | None = None
    """Folder of the synchroniser's CURVE keys (runtime.diloco.keys): its secret key and
    every learner's public key; only those learners are let in, each as its own name."""
    plaintext: bool = False
    """No keys: anyone who reaches the port may act as any learner (tests and benchmarks on
    loopback only)."""

    @model_validator(mode="after")
    def _consistent(self) -> SynchroniserConfig:
        _keys_or_plaintext(self.keys, self.plaintext)
        return self


def _keys_or_plaintext(keys: str | None, plaintext: bool) -> None:
    """A link is CURVE unless plaintext is asked for by name: never by a forgotten field."""
    if keys is None and not plaintext:
        raise ValueError("keys: the folder of this party's CURVE keys (made by `gkr diloco "
                         "keys`; a local run makes its own), or plaintext: true for an "
                         "unauthenticated link on loopback")
    if keys is not None and plaintext:
        raise ValueError("keys and plaintext: true exclude each other")


def from_environment(environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The JSON document the deployment put in `GKR_DILOCO`, or None."""
    text = environ.get(Env.DILOCO)
    if text is None:
        return None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError("", f"not JSON: {error}", Env.DILOCO) from None
    if not isinstance(document, dict):
        raise ConfigError("", "a JSON object of DiLoCo settings", Env.DILOCO)
    return document


def with_deployment(raw: dict[Any, Any], environ: Mapping[str, str]) -> dict[Any, Any]:
    """A composed training config with the learner settings the deployment gave (they win
    over the file's) and, for a learner, its own checkpoint folder: the learners of one
    experiment run the same command, and must not write into each other's checkpoints."""
    document = from_environment(environ)
    section = {**(raw.get("diloco") or {}), **(document or {})}
    if document is not None:
        section["enabled"] = True
    if not section.get("enabled"):
        return raw
    raw = {**raw, "diloco": section}
    checkpoint = raw.get("checkpoint")
    if isinstance(checkpoint, dict) and checkpoint.get("uri"):
        learner = section.get("learner", DilocoConfig.model_fields["learner"].default)
        uri = f"{str(checkpoint['uri']).rstrip('/')}/learners/{learner}"
        raw["checkpoint"] = {**checkpoint, "uri": uri}
    return raw


def learner_shard(config: DilocoConfig, rank: int, world: int) -> tuple[int, int]:
    """Which shard of the data a rank reads, of how many: a learner's ranks come after the
    earlier learners' ranks, so learners read disjoint parts of one global stream. The
    shards are exact when every learner has the same world size; learners of different
    sizes overlap or leave gaps."""
    if not config.enabled:
        return rank, world
    return config.index * world + rank, config.learners * world
