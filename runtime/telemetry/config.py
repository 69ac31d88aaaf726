"""Configuration of a run's telemetry (the `telemetry` section of a training config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InjectDelay(_Section):
    """A deliberate straggler, so a user can watch `gkr stragglers` find it."""

    rank: int = Field(ge=0, description="The global rank that arrives late.")
    seconds: float = Field(gt=0, le=60, description="Sleep before each step's backward pass.")


class TelemetryConfig(_Section):
    """What a run records, and where."""

    enabled: bool = Field(True, description="Record metrics, fleet summaries and collectives.")
    dsn: str | None = Field(
        None, description="Store DSN (chdb:///folder or http(s)://host:8123/db); None: "
                          "GKR_TELEMETRY_DSN, else .gkr/telemetry under the current directory.",
    )
    queue_rows: int = Field(50_000, ge=100, description="Rows a process buffers before dropping.")
    time_collectives: bool = Field(
        True, description="Time each gradient all-reduce per rank (the CPU/gloo stand-in for "
                          "NCCL Inspector; on GPUs the inspector's own records are used too).",
    )
    peak_tflops: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="Peak TFLOP/s of one device, for MFU; None: GKR_PEAK_TFLOPS (the "
                    "accelerator catalog's dense bf16 peak, in GPU pods), else no MFU.",
    )
    ledger: bool = Field(
        True, description="Keep the sample ledger: each rank's global sample spans of every "
                          "committed step (runtime.telemetry.ledger), which `gkr ledger RUN` "
                          "judges: every sample trained exactly once. Its files are written "
                          "with `enabled` false too; the store judges them when on.",
    )
    inject_delay: InjectDelay | None = Field(None, description="A deliberate straggler.")
