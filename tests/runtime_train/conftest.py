"""Fixtures of the runtime_train tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.aux.config import OnWorkerLoss
from tests.runtime_train.fabric import Fabric


@pytest.fixture
def fabric(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fabric]:
    policy, queue_size = getattr(request, "param", (OnWorkerLoss.RETRY, 64))
    built = Fabric(tmp_path, policy, queue_size)
    built.add_worker("w0")
    yield built
    built.close()


