"""Datasets, transforms and collate functions by `_target_`: checked before any data loads."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from runtime.components import build_callable
from runtime.data.config import DataConfig, check_data
from runtime.data.sources import LocalSource
from runtime.errors import ConfigError

FEATURES = "runtime.data.synthetic.SyntheticFeatures"


class Refuses:
    """A dataset that must not be built by a check."""

    def __init__(self, path: str) -> None:
        raise AssertionError("check_data built a dataset")


class Scale:
    """A transform class: built once with its keyword arguments, then called per sample."""

    built = 0

    def __init__(self, factor: float) -> None:
        Scale.built += 1
        self.factor = factor

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        return {**sample, "input": sample["input"] * self.factor}


@pytest.fixture(autouse=True)
def _count_from_zero() -> None:
    Scale.built = 0


def shift(sample: dict[str, Any], by: float = 0.0) -> dict[str, Any]:
    return {**sample, "input": sample["input"] + by}


def _data(*datasets: dict[str, Any], **kw: Any) -> DataConfig:
    return DataConfig.model_validate({"datasets": list(datasets), "batch_size": 2, **kw})


def test_other_keys_are_the_keyword_arguments() -> None:
    entry = {"name": "f", "weight": 2.0, "_target_": FEATURES, "length": 8, "dim": 3}
    config = _data(entry)
    source = config.datasets[0]
    assert (source.target, source.name, source.kwargs) == (FEATURES, "f", {"length": 8, "dim": 3})
    assert config.model_dump(by_alias=True)["datasets"][0] == entry  # round-trips
    assert LocalSource(config).datasets[0][0]["input"].shape == (3,)


def test_a_missing_class_names_the_field_and_what_the_module_defines() -> None:
    config = _data({"name": "f", "_target_": "runtime.data.synthetic.SyntheticFeaturez"})
    with pytest.raises(ConfigError) as error:
        check_data(config)
    assert error.value.field == "data.datasets[0]._target_"
    assert "SyntheticFeatures" in error.value.message and "SyntheticImages" in error.value.message


def test_a_missing_module_names_the_field() -> None:
    config = _data({"name": "f", "_target_": FEATURES},
                   {"name": "g", "_target_": "no_such_package.data.Thing"})
    with pytest.raises(ConfigError, match="no module 'no_such_package'") as error:
        check_data(config)
    assert error.value.field == "data.datasets[1]._target_"


def test_a_wrong_keyword_names_itself_and_the_accepted_ones() -> None:
    with pytest.raises(ConfigError) as error:
        check_data(_data({"name": "f", "_target_": FEATURES, "lenght": 8}))
    assert error.value.field == "data.datasets[0].lenght"
    assert "accepted: length, dim" in error.value.message


def test_a_missing_required_argument_names_the_target() -> None:
    with pytest.raises(ConfigError, match="missing a required argument: 'path'") as error:
        check_data(_data({"name": "f", "_target_": f"{__name__}.Refuses"}))
    assert error.value.field == "data.datasets[0]._target_"


def test_the_check_builds_nothing() -> None:
    check_data(_data({"name": "f", "_target_": f"{__name__}.Refuses", "path": "x"},
                     transform={"_target_": f"{__name__}.Scale", "factor": 2.0}))
    assert Scale.built == 0


def test_transform_keywords_are_checked_after_the_sample() -> None:
    config = _data({"name": "f", "_target_": FEATURES},
                   transform={"_target_": f"{__name__}.shift", "by_": 1.0})
    with pytest.raises(ConfigError, match="accepted: sample, by") as error:
        check_data(config)
    assert error.value.field == "data.transform.by_"


def test_a_function_is_bound_and_a_class_built_once() -> None:
    sample = {"input": torch.ones(2)}
    section = _data({"name": "f", "_target_": FEATURES}, transform={
        "_target_": f"{__name__}.shift", "by": 1.5}).transform
    assert section is not None
    bound = build_callable(section, "data.transform")
    assert bound(sample)["input"].tolist() == [2.5, 2.5]
    config = _data({"name": "f", "_target_": FEATURES, "length": 4},
                   transform={"_target_": f"{__name__}.Scale", "factor": 3.0})
    source = LocalSource(config)
    out = source.fetch([0, 0], [0, 1], [5, 6])
    assert Scale.built == 1
    raw = LocalSource(_data({"name": "f", "_target_": FEATURES, "length": 4})).fetch(
        [0], [1], [0])
    assert torch.equal(out[1]["input"], raw[0]["input"] * 3.0)


def test_the_old_factory_form_says_what_replaced_it() -> None:
    with pytest.raises(ValueError, match=r"now `_target_: module\.Class`"):
        _data({"name": "f", "factory": "runtime.data.synthetic:SyntheticFeatures"})
