"""Configuration of distributed checkpointing (the `checkpoint` section of a training config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CheckpointConfig(BaseModel):
    """When and where training state is saved with torch.distributed.checkpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Save checkpoints at all.")
    uri: str = Field(
        default="checkpoints",
        min_length=1,
        description="Local directory or fsspec URL (e.g. `gs://bucket/run`) holding checkpoints.",
    )
    interval_steps: int = Field(default=100, gt=0, description="Save after every N-th step.")
    keep_last: int = Field(
        default=3, ge=1, description="Committed checkpoints kept; older ones are pruned."
    )
    async_save: bool = Field(
        default=True,
        description="Stage into host memory and persist in the background (False: block).",
    )
    resume_from: str | None = Field(
        default="latest",
        description="`latest`, an explicit checkpoint URI, or None to start fresh.",
    )
