"""Which agent `gkr diagnose` runs: the `--agent` flag, else $GKR_AGENT_COMMAND, else the
catalog's `agent.command` (platform/catalog/gke.yaml)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from generator.errors import BadRequest
from runtime.identity import Env


@dataclass(frozen=True)
class AgentSettings:
    """The agent's argv, the variables it may see, its time limit."""

    command: tuple[str, ...]
    env: tuple[str, ...] = ()
    timeout_s: float = 3600.0


def agent_settings(flag: str | None, root: Path | None,
                   environ: Mapping[str, str] | None = None) -> AgentSettings:
    """The agent to run; BadRequest saying how to name one when none is configured."""
    env = os.environ if environ is None else environ
    catalog = _catalog_agent(root)
    words = flag or env.get(Env.AGENT_COMMAND, "")
    try:
        command = tuple(shlex.split(words)) if words.strip() else tuple(catalog.command)
    except ValueError as error:
        source = "--agent" if flag else Env.AGENT_COMMAND
        raise BadRequest(f"{source}: {error}") from None
    if not command:
        raise BadRequest("no agent command: pass --agent 'COMMAND ARGS', set "
                         f"{Env.AGENT_COMMAND}, or set agent.command in "
                         "platform/catalog/gke.yaml")
    return AgentSettings(command, tuple(catalog.env), float(catalog.timeout_s))


@dataclass(frozen=True)
class _NoCatalog:
    command: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout_s: int = 3600


def _catalog_agent(root: Path | None) -> _NoCatalog:
    """The catalog's settings; outside a GKR repository, none."""
    if root is None:
        return _NoCatalog()
    from generator.catalog import Catalog

    agent = Catalog(root).platform.agent
    return _NoCatalog(tuple(agent.command), tuple(agent.env), agent.timeout_s)
