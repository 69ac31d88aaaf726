"""Session-wide test settings."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.identity import Env


@pytest.fixture(autouse=True, scope="session")
def _private_telemetry_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Training runs in tests (and the `gkr` processes they start) write their telemetry to a
    store of the test session, never to the checkout's `.gkr/telemetry` a user may be reading."""
    folder: Path = tmp_path_factory.mktemp("telemetry")
    previous = os.environ.get(Env.TELEMETRY_DSN)
    os.environ[Env.TELEMETRY_DSN] = f"chdb://{folder}"
    yield
    if previous is None:
        os.environ.pop(Env.TELEMETRY_DSN, None)
    else:
        os.environ[Env.TELEMETRY_DSN] = previous
