"""The fault-tolerance tests run on the test process's shared local Ray (the `local_ray`
fixture of tests/conftest.py, testing/ray.py), whose workers import the checkout: the
loader's producers import the fault-injecting dataset from there."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.telemetry.ledger import LEDGER_DIR


@pytest.fixture(autouse=True)
def _ledger_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's sample ledger in its `tmp_path / "ledger"`: the driver (in the test
    process) reads GKR_LEDGER_DIR and hands the folder to the ranks."""
    folder = tmp_path / "ledger"
    monkeypatch.setenv(LEDGER_DIR, str(folder))
    return folder
