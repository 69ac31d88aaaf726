"""Fixtures of the fault-tolerance tests: a local Ray whose workers import the checkout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """Ray for one test module; the loader's producers import tests.runtime_ft.faults."""
    env = {"env_vars": {"PYTHONPATH": str(ROOT)}}
    ray.init(num_cpus=8, include_dashboard=False, logging_level="WARNING", runtime_env=env)
    yield
    ray.shutdown()
