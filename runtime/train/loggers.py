"""Metric loggers for `loggers: [{_target_: ...}]`: rank 0 hands each one the metrics of
every logged step. A logger is any object with `log(step, metrics)` and `close()`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol


class MetricLogger(Protocol):
    """Where rank 0's metrics go besides the driver's output and the telemetry store."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class JsonlLogger:
    """One JSON object per logged step, appended to `path` (a local file)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.file.write(json.dumps({"step": step, **metrics}) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()
