"""Where a run's bundles go: `crash.uri`, else beside its checkpoints, else under .gkr/runs."""

from __future__ import annotations

from pathlib import Path

from runtime.run.config import TrainConfig

LOCAL_RUNS = Path(".gkr/runs")  # what `gkr run --local` keeps per run name (checkpoints too)
BUNDLES = "bundles"


def bundle_root(config: TrainConfig) -> str:
    """The folder holding one bundle folder per run id of this run name."""
    section = config.crash
    if section.uri:
        return section.uri.rstrip("/")
    checkpoint = config.checkpoint
    if checkpoint is not None and checkpoint.enabled:
        parent, _, name = checkpoint.uri.rstrip("/").rpartition("/")
        if name == "checkpoints" and parent:
            return f"{parent}/{BUNDLES}"
    return str(LOCAL_RUNS / config.run.name / BUNDLES)


def localize_bundles(config: TrainConfig) -> TrainConfig:
    """The config with its bundle folder decided and, when local, absolute: the ranks run in a
    working directory of Ray Train's, and write their reports where the driver writes."""
    root = bundle_root(config)
    if "://" not in root:
        root = str(Path(root).expanduser().resolve())
    crash = config.crash.model_copy(update={"uri": root})
    return config.model_copy(update={"crash": crash})


def bundle_uri(config: TrainConfig, run_id: str) -> str:
    """The bundle folder of one run (its id: the run name and a random suffix)."""
    return f"{bundle_root(config)}/{run_id}"
