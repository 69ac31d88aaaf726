"""A rank points NCCL Inspector at its run's subfolder, which Fluent Bit's path parser reads
as the run (tests/platform/test_telemetry.py checks the parser side)."""

from __future__ import annotations

from pathlib import Path

from runtime.train.telemetry import INSPECTOR_DUMP_DIR, route_inspector_dumps


def test_the_dump_folder_gains_the_run_once(tmp_path: Path) -> None:
    env = {INSPECTOR_DUMP_DIR: str(tmp_path)}
    route_inspector_dumps("llm-7b-3f2a1c", env)
    route_inspector_dumps("llm-7b-3f2a1c", env)  # a restarted rank in the same process
    assert env[INSPECTOR_DUMP_DIR] == str(tmp_path / "llm-7b-3f2a1c")
    assert (tmp_path / "llm-7b-3f2a1c").is_dir()


def test_without_the_inspector_nothing_changes() -> None:
    env: dict[str, str] = {}
    route_inspector_dumps("run", env)
    assert env == {}
