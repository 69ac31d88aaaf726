"""How a run was started: what a bundle records so that the run can be read and relaunched."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Launch:
    """The command that started a run, as its starter (`gkr run`, `python -m runtime.train`)
    knows it; the driver alone knows only the resolved config."""

    config: str  # the training config file, absolute
    overrides: tuple[str, ...] = ()  # Hydra overrides as given (not this machine's adaptation)
    spec: str | None = None  # the job spec the run came from, if any
    manifest: str | None = None  # that spec's rendered manifest, if any
    cwd: str = field(default_factory=os.getcwd)
    argv: tuple[str, ...] = field(default_factory=lambda: tuple(sys.argv))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Launch:
        known = {key: data[key] for key in cls.__dataclass_fields__ if key in data}
        for key in ("overrides", "argv"):
            known[key] = tuple(known.get(key) or ())
        return cls(**known)
