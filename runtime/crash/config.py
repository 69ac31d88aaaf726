"""Configuration of crash bundles (the `crash` section of a training config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MIB = 1 << 20


class CrashConfig(BaseModel):
    """What a failed run leaves for its diagnosis, and the bounds on writing it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Write a crash bundle when the run fails.")
    uri: str | None = Field(
        None, description="Folder or fsspec URL (gs://...) holding the run's bundles, one "
                          "folder per run id; None: `bundles` beside a checkpoint folder named "
                          "`checkpoints`, else .gkr/runs/<run.name>/bundles.")
    log_lines: int = Field(200, ge=0, le=100_000,
                           description="Last lines kept of each rank's and service's log.")
    max_bytes: int = Field(32 * MIB, ge=1 * MIB,
                           description="Size bound of the driver's parts of a bundle; parts "
                                       "beyond it are left out and listed as such. Each rank "
                                       "that raised adds its report (its log_lines and a "
                                       "bounded traceback) and at most 1 MiB of Flight "
                                       "Recorder buffer.")
    timeout_s: float = Field(60.0, gt=0, le=3600,
                             description="Time bound of writing a bundle; the run's own error "
                                         "is reported when it passes, bundle or not.")
