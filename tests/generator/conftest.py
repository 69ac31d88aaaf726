"""Fixtures for generator tests: a scratch GKR repository built from the real catalog."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"

VALID_SPEC: dict[str, Any] = {
    "kind": "rayjob",
    "cluster": "all-accelerators",
    "owner": "alice@reve.ai",
    "pods": 2,
    "accelerator": "H200",
    "image": "trainer",
    "cmd": "python -m runtime.train configs/tiny.yaml",
}


class ScratchRepo:
    """A repository with the real platform catalog and one test cluster; no jobs yet."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copytree(REPO / "platform/catalog", root / "platform/catalog")
        (root / "clusters").mkdir()
        shutil.copy(DATA / "all-accelerators.yaml", root / "clusters")

    def write_spec(self, name: str, spec: dict[str, Any] | str, team: str = "ml") -> Path:
        path = self.root / "jobs" / team / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
        path.write_text(text)
        return path

    def snapshot(self) -> dict[str, bytes]:
        """Every file outside jobs/ and the cache, to prove that nothing else was written."""
        return {
            p.relative_to(self.root).as_posix(): p.read_bytes()
            for p in sorted(self.root.rglob("*"))
            if p.is_file() and ".gkr" not in p.parts and "jobs" not in p.parts
        }


@pytest.fixture
def repo(tmp_path: Path) -> ScratchRepo:
    return ScratchRepo(tmp_path)


@pytest.fixture
def spec() -> Callable[..., dict[str, Any]]:
    def make(**changes: Any) -> dict[str, Any]:
        merged = {**VALID_SPEC, **changes}
        return {k: v for k, v in merged.items() if v is not None}

    return make
