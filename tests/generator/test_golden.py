"""Golden files: the rendered manifests of every kind on every accelerator (and CPU-only).

A template or catalog change shows up as a reviewable diff of tests/generator/golden/.
Regenerate after an intended change with: GKR_UPDATE_GOLDEN=1 pytest tests/generator
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from generator.render import render_tree

GOLDEN = Path(__file__).parent / "golden"
ACCELERATORS = ["H100", "H100-Mega", "H200", "B200", None]
KINDS = ["rayjob", "raycluster", "job"]
CASES = [(kind, accel) for kind in KINDS for accel in ACCELERATORS]


def _spec(kind: str, accelerator: str | None) -> dict:
    spec = {
        "kind": kind, "cluster": "all-accelerators", "owner": "alice@reve.ai",
        "image": "trainer", "env": {"RUN": "golden"}, "labels": {"experiment": "golden"},
    }
    if accelerator:
        spec |= {"accelerator": accelerator, "pods": 2,
                 "rack_affinity": {"level": "subblock"}}
    if kind != "raycluster":
        spec |= {"cmd": "python -m runtime.train configs/tiny.yaml", "deadline": "2h",
                 "ttl": "30m"}
    if kind == "rayjob":
        spec |= {"relaunch_reservation": "15m", "working_dir": "gs://code/run.zip"}
    return spec


def _name(kind: str, accelerator: str | None) -> str:
    return f"{kind}-{(accelerator or 'cpu').lower()}"


@pytest.mark.parametrize(("kind", "accelerator"), CASES, ids=[_name(*c) for c in CASES])
def test_rendered_manifests_match_golden(repo, kind: str, accelerator: str | None) -> None:
    name = _name(kind, accelerator)
    repo.write_spec(name, _spec(kind, accelerator))
    tree = render_tree(repo.root, use_cache=False)
    rendered = tree.files[f"kustomize/overlays/all-accelerators/jobs/team-ml/{name}.yaml"]
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("GKR_UPDATE_GOLDEN") == "1":
        golden.write_text(rendered)
    assert golden.is_file(), f"missing {golden}; run with GKR_UPDATE_GOLDEN=1"
    assert rendered == golden.read_text()
