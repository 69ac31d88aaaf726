"""Training progress as the driver sees it: rank 0 records losses in a small named actor."""

from __future__ import annotations

from typing import Any


class RunProgress:
    """Losses by step, recorded by rank 0 and read by the driver after `fit`."""

    def __init__(self) -> None:
        self.losses: dict[int, float] = {}

    def record(self, step: int, loss: float) -> None:
        """Remember the loss at `step`."""
        self.losses[step] = loss

    def history(self) -> dict[int, float]:
        """Every recorded step."""
        return dict(self.losses)


def progress_name(run_id: str) -> str:
    """The named-actor name of a run's progress record."""
    return f"gkr-progress-{run_id}"


def start_progress(run_id: str) -> Any:
    """Start the progress actor (no CPU reserved)."""
    import ray

    return ray.remote(num_cpus=0)(RunProgress).options(name=progress_name(run_id)).remote()
