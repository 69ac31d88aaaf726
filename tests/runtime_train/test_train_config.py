"""Composition (packaged defaults + YAML + overrides) and validation of training configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.run.config import build_config
from runtime.train.compose import compose_raw, load_config
from runtime.train.local import LOCAL_DEFAULTS, local_overrides
from runtime.train.numa import numa_nodes, parse_cpulist

EXAMPLES = Path(__file__).resolve().parents[2] / "examples/train"
TINY, DISTILL = EXAMPLES / "tiny.yaml", EXAMPLES / "distill.yaml"


def test_distill_example_composes_defaults_groups_and_overrides() -> None:
    config = load_config(DISTILL, ["run.steps=7", "aux.services.teacher.ratio=4"])
    assert config.run.steps == 7
    assert config.layout.backend == "gloo"  # from the layout/cpu group
    assert config.model.kwargs["input_dim"] == config.task.kwargs["input_dim"] == 32  # group
    teacher = config.aux.services["teacher"]
    assert (teacher.impl, teacher.ratio, teacher.options["seed"]) == ("encoder", 4, 7)


def test_tiny_example_is_the_transformer_on_the_stdlib() -> None:
    config = load_config(TINY, ["model.n_layers=3"])
    assert config.model.target == "runtime.models.transformer.Transformer"
    assert config.model.kwargs["n_layers"] == 3
    assert config.task.target == "runtime.tasks.lm.LanguageModelling"
    assert config.data is not None and config.data.datasets[0].kwargs["prepare_from"] == \
        "python-stdlib"


def test_unknown_override_key_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"run\.stepz"):
        load_config(TINY, ["run.stepz=3"])


def test_bad_value_names_the_field_path() -> None:
    with pytest.raises(ConfigError, match=r"aux\.services\.teacher\.ratio"):
        load_config(DISTILL, ["aux.services.teacher.ratio=-1"])


def test_unknown_key_in_yaml_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("defaults:\n  - gkr_defaults\n  - _self_\nlayout:\n  widht: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: layout\.widht: unknown field; allowed: "):
        load_config(path)


def test_target_service_must_exist() -> None:
    task = {"_target_": "runtime.tasks.distill.Distillation", "target_service": "nope"}
    with pytest.raises(ConfigError, match=r"task\.target_service: 'nope' is not in aux"):
        build_config({"task": task})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")


def test_local_overrides_move_gpu_work_to_cpus() -> None:
    raw = compose_raw(DISTILL)
    assert local_overrides(raw, has_gpu=True) == ["run.ray_address=null"]
    cpu = local_overrides(raw, has_gpu=False)
    assert "layout.gpus_per_worker=0" in cpu
    assert "aux.services.teacher.gpus_per_worker=0" in cpu
    assert load_config(DISTILL, cpu).layout.gpus_per_worker == 0


def test_local_runs_are_quiet_unless_the_command_line_says_otherwise() -> None:
    assert load_config(TINY).logging.forward_worker_logs is True  # a cluster's driver log
    assert load_config(TINY, LOCAL_DEFAULTS).logging.forward_worker_logs is False
    loud = [*LOCAL_DEFAULTS, "logging.forward_worker_logs=true"]
    assert load_config(TINY, loud).logging.forward_worker_logs is True


def test_numa_topology_parsing(tmp_path: Path) -> None:
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    for node, cpus in (("node0", "0-1"), ("node1", "2-3"), ("node2", "")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    assert numa_nodes(tmp_path) == [[0, 1], [2, 3]]


def test_module_entry_point_usage_and_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.train.__main__ import main

    assert main([]) == 2
    assert main([str(TINY), "run.steps=0"]) == 1
    assert "run.steps" in capsys.readouterr().err


def test_a_missing_interpolation_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"Interpolation key 'model\.vocab_size' not found"):
        load_config(TINY, ["~model"])  # task.vocab_size is ${model.vocab_size}
