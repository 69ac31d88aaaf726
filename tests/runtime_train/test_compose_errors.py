"""A training config that Hydra cannot compose is a ConfigError naming the file and, where
there is one, the field; `python -m runtime.train` prints it as one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.train.compose import load_config

HEAD = "defaults:\n  - gkr_defaults\n  - _self_\n"


@pytest.mark.parametrize(("body", "field", "says"), [
    (HEAD + "run:\n  name: ${nothere}\n", "run.name", "Interpolation key 'nothere' not found"),
    ("run: [unclosed\n", "", "not valid YAML"),
    (HEAD + "run:\n  name: ok\n  steps: [1, 2\n", "", "line 6"),
])
def test_a_config_that_does_not_compose_names_its_file_and_field(
        tmp_path: Path, body: str, field: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.field == field
    assert str(path) in str(raised.value) and says in str(raised.value)


def test_the_driver_prints_one_line_and_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("run: [unclosed\n")
    done = subprocess.run([sys.executable, "-m", "runtime.train", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: {path}: not valid YAML") and "Traceback" not in \
        done.stderr
