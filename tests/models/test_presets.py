"""Every model preset composes through Hydra's `pkg://runtime.configs` search path and builds
on the meta device with the size its source gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch import nn

from runtime.models import MLP, Transformer, ViT

SEARCH_PATH = "hydra.searchpath=[pkg://runtime.configs]"  # as the driver's compose step
PRESETS = Path(__file__).resolve().parents[2] / "runtime/configs/model"


def _build(preset: str, folder: Path) -> nn.Module:
    (folder / "train.yaml").write_text(f"defaults:\n  - model: {preset}\n  - _self_\n")
    with initialize_config_dir(version_base=None, config_dir=str(folder)):
        config = compose("train", overrides=[SEARCH_PATH])
    with torch.device("meta"):
        model = instantiate(config.model)
    assert isinstance(model, nn.Module)
    return model


@pytest.mark.parametrize(("preset", "kind", "low", "high"), [
    ("transformer_tiny", Transformer, 1.5e5, 1.6e5),
    ("transformer_small", Transformer, 4e6, 6e6),
    ("transformer_7b", Transformer, 6.7e9, 6.8e9),  # Llama 2 7B: 6,738,415,616
    ("transformer_70b", Transformer, 7.0e10, 7.1e10),  # Llama 3 70B: 70,553,706,496
    ("vit_g", ViT, 1.0e9, 1.02e9),  # ViT-g/14: 1,011M (Zhai et al., table 2)
    ("mlp", MLP, 2e3, 1e4),
])
def test_preset_builds_on_meta_with_its_published_size(
        preset: str, kind: type, low: float, high: float, tmp_path: Path) -> None:
    model = _build(preset, tmp_path)
    assert isinstance(model, kind)
    assert all(p.is_meta for p in model.parameters())
    assert low <= sum(p.numel() for p in model.parameters()) <= high


def test_every_preset_file_is_tested() -> None:
    tested = {"transformer_tiny", "transformer_small", "transformer_7b", "transformer_70b",
              "vit_g", "mlp"}
    assert {path.stem for path in PRESETS.glob("*.yaml")} == tested
