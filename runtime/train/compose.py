"""Hydra composition: packaged reusable defaults, the selected YAML, command-line overrides.

The selected YAML may list reusable groups from `runtime/configs` in its `defaults`
(for example `aux@aux.services.teacher: encoder`); overrides use Hydra's grammar
(`run.steps=50`, `+aux/services@...`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from runtime.diloco.config import with_deployment
from runtime.errors import ConfigError, FieldProblem
from runtime.run.config import TrainConfig, build_config

SEARCH_PATH = "hydra.searchpath=[pkg://runtime.configs]"


def compose_raw(path: Path, overrides: Sequence[str] = ()) -> dict[Any, Any]:
    """The composed configuration as a plain dict (no validation yet). Its keys are those the
    YAML wrote, not necessarily strings (OmegaConf allows `1:`); validation rejects others."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ConfigError("config", f"no such file: {path}", str(path))
    try:
        with initialize_config_dir(version_base=None, config_dir=str(path.parent)):
            composed = compose(path.stem, overrides=[SEARCH_PATH, *overrides])
        raw = OmegaConf.to_container(composed, resolve=True)  # a missing ${key} raises here
    except yaml.YAMLError as error:  # the file itself, or a defaults file it names
        raise ConfigError("", f"not valid YAML: {' '.join(str(error).split())}",
                          str(path)) from error
    except OmegaConfBaseException as error:  # e.g. a ${key} that names nothing
        key = getattr(error, "full_key", None)
        message = str(error).strip().splitlines()[0]
        if not key:
            raise ConfigError("overrides", message, str(path)) from error
        problem = FieldProblem(key, message, _loc(key))
        raise ConfigError(source=str(path), problems=[problem]) from error
    except HydraException as error:
        raise ConfigError("overrides", _first_line(error), str(path)) from error
    assert isinstance(raw, dict)
    raw.pop("hydra", None)
    return raw


def load_config(path: Path, overrides: Sequence[str] = (),
                environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Compose, add what the deployment says (a DiLoCo learner's settings), validate."""
    raw = with_deployment(compose_raw(path, overrides), os.environ if environ is None else environ)
    return build_config(raw, source=str(path))


def _loc(key: str) -> tuple[str | int, ...]:
    """OmegaConf's `data.datasets[0].path` as a field path: ("data", "datasets", 0, "path")."""
    return tuple(int(part) if part.isdigit() else part
                 for part in re.split(r"[.\[\]]+", key) if part)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return " ".join(text.splitlines()[:2]) if text else type(error).__name__
