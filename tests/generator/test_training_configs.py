"""`gkr validate` composes the training config each job's cmd runs (generator.trainconfig):
the committed specs' configs compose, and a bad field is reported at the line that set it
(the spec's cmd or the config file's key), never as a traceback."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from generator.catalog import Catalog
from generator.errors import InvalidInput, Problem
from generator.experiments import resolve_all
from generator.resolve import ResolvedJob
from generator.specs import load_spec
from generator.trainconfig import check_training, train_argv
from generator.validate import validate_repository, validate_specs
from tests.generator.conftest import REPO, ScratchRepo

GKR = str(Path(sys.executable).with_name("gkr"))
SPEC = "jobs/ml/train.yaml"
CONFIG = "configs/tiny.yaml"
# A small run on the packaged presets; line numbers below count from here.
TINY = """\
defaults:
  - gkr_defaults
  - model: transformer_tiny
  - _self_
run:
  name: tiny
  steps: 10
task:
  _target_: runtime.tasks.lm.LanguageModelling
  vocab_size: ${model.vocab_size}
data:
  datasets:
    - name: tokens
      _target_: runtime.data.synthetic.SyntheticTokens
      seq_len: 32
  batch_size: 2
"""


def write_run(repo: ScratchRepo, cmd: str, config: str | None = TINY,
              working_dir: str = "/workspace") -> Path:
    """A spec whose cmd (on line 8) runs the config at configs/tiny.yaml."""
    if config is not None:
        (repo.root / "configs").mkdir(exist_ok=True)
        (repo.root / CONFIG).write_text(config)
    spec = {"kind": "rayjob", "cluster": "all-accelerators", "owner": "alice@reve.ai",
            "pods": 2, "accelerator": "H200", "image": "trainer", "working_dir": working_dir,
            "cmd": cmd}
    return repo.write_spec("train", spec)


def problems_of(repo: ScratchRepo, path: Path) -> list[Problem]:
    with pytest.raises(InvalidInput) as raised:
        validate_specs(repo.root, [path])
    return raised.value.problems


CMD_LINE = 8  # of "cmd" in write_run's spec (yaml.safe_dump keeps the order given)


def test_every_committed_training_config_composes() -> None:
    report = validate_specs(REPO, [REPO / "jobs"])
    # pretrain-7b, the sft ablation, the ViT, and the two DiLoCo learners (each with its
    # deployment's settings)
    assert (report.configs, report.configs_unchecked) == (5, 0)


def test_gkr_validate_names_the_training_configs() -> None:
    result = subprocess.run([GKR, "validate", "jobs"], cwd=REPO, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "5 training configs" in result.stdout


@pytest.mark.parametrize(("cmd", "argv"), [
    ("python -m runtime.train configs/a.yaml run.steps=5", ["configs/a.yaml", "run.steps=5"]),
    ("uv run python -m runtime.train c.yaml 'x=a b'", ["c.yaml", "x=a b"]),
    ("/usr/bin/python3.11 -m runtime.train c.yaml # a comment", ["c.yaml"]),
    ("python -m runtime.train c.yaml && rm -rf /", None),
    ("python -m runtime.diloco", None),
    ("sleep infinity", None),
])
def test_which_commands_run_the_driver(cmd: str, argv: list[str] | None) -> None:
    assert train_argv(cmd) == argv


def test_an_override_the_config_lacks_is_at_the_cmd_line(repo: ScratchRepo) -> None:
    path = write_run(repo, f"python -m runtime.train {CONFIG} model.dimm=3")
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line, problem.field) == (SPEC, CMD_LINE, "cmd")
    assert "model.dimm" in problem.message and CONFIG in problem.message


def test_a_bad_value_the_cmd_sets_is_at_the_cmd_line(repo: ScratchRepo) -> None:
    path = write_run(repo, f"uv run python -m runtime.train {CONFIG} run.steps=0")
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line) == (SPEC, CMD_LINE)
    assert "run.steps: input should be greater than or equal to 1" in problem.message


def test_a_bad_key_of_the_config_is_at_its_line(repo: ScratchRepo) -> None:
    path = write_run(repo, f"python -m runtime.train {CONFIG}",
                     TINY.replace("  steps: 10", "  stepz: 10"))
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line, problem.field) == (CONFIG, 7, "run.stepz")
    assert problem.message.startswith("unknown field; allowed: ")


def test_a_bad_value_in_a_defaults_file_is_at_that_file(repo: ScratchRepo) -> None:
    config = TINY.replace("  - _self_", "  - _self_\n  - base")
    (repo.root / "configs").mkdir()
    (repo.root / "configs/base.yaml").write_text("layout:\n  tp: 0\n")
    path = write_run(repo, f"python -m runtime.train {CONFIG}", config)
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line, problem.field) == ("configs/base.yaml", 2,
                                                           "layout.tp")


def test_a_missing_config_is_at_the_cmd_line(repo: ScratchRepo) -> None:
    path = write_run(repo, "python -m runtime.train configs/nope.yaml")
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line) == (SPEC, CMD_LINE)
    assert problem.message.startswith("configs/nope.yaml: not found")


def test_a_config_outside_the_repository_is_refused(repo: ScratchRepo) -> None:
    path = write_run(repo, "python -m runtime.train ../../etc/passwd.yaml")
    [problem] = problems_of(repo, path)
    assert "outside the repository" in problem.message


def test_a_remote_archive_s_config_is_not_checked(repo: ScratchRepo) -> None:
    path = write_run(repo, "python -m runtime.train configs/elsewhere.yaml", None,
                     working_dir="gs://code/archive.zip")
    report = validate_specs(repo.root, [path])
    assert (report.configs, report.configs_unchecked) == (0, 1)
    assert "1 not checked" in report.summary()


def test_an_absolute_config_inside_the_working_dir_is_read_from_the_repository(
        repo: ScratchRepo) -> None:
    path = write_run(repo, f"python -m runtime.train /workspace/{CONFIG} run.steps=-1")
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line) == (SPEC, CMD_LINE)


def test_a_config_that_is_not_yaml_is_at_its_line(repo: ScratchRepo) -> None:
    path = write_run(repo, f"python -m runtime.train {CONFIG}", TINY + "other: [1\n")
    [problem] = problems_of(repo, path)
    assert problem.file == CONFIG and problem.line is not None
    assert problem.message.startswith("not valid YAML")


def test_an_interpolation_the_config_breaks_is_at_its_key(repo: ScratchRepo) -> None:
    path = write_run(repo, f"python -m runtime.train {CONFIG}",
                     TINY.replace("${model.vocab_size}", "${model.vocab_sizes}"))
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line) == (CONFIG, 10)
    assert "model.vocab_sizes" in problem.message


def test_a_defaults_entry_that_names_nothing_is_at_the_defaults(repo: ScratchRepo) -> None:
    path = write_run(repo, f"python -m runtime.train {CONFIG} run.steps=3",
                     TINY.replace("transformer_tiny", "transformer_8b"))
    [problem] = problems_of(repo, path)
    assert (problem.file, problem.line) == (CONFIG, 1)
    assert "model/transformer_8b" in problem.message


def test_validate_repository_reports_the_config(repo: ScratchRepo) -> None:
    write_run(repo, f"python -m runtime.train {CONFIG} +run.colour=red")
    with pytest.raises(InvalidInput) as raised:
        validate_repository(repo.root, kustomize=False)
    [problem] = raised.value.problems
    assert (problem.file, problem.line) == (SPEC, CMD_LINE)
    assert "run.colour: unknown field" in problem.message


# -- any override text: a problem with a file and a line, never a traceback ----------------

KEYS = ["run.steps", "+run.x", "~data", "model", "model.dim", "layout.tp", "optim.lr",
        "data.datasets.0.seq_len", "+aux/services@aux.services.t", "hydra.run.dir", ""]


def overrides() -> st.SearchStrategy[str]:
    values = st.text(st.characters(exclude_characters="\0"), max_size=12)
    structured = st.builds(lambda key, eq, value: f"{key}{eq}{value}", st.sampled_from(KEYS),
                           st.sampled_from(["=", "==", ""]), values)
    return st.one_of(structured, values)


@pytest.fixture(scope="module")
def tiny_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ResolvedJob]:
    repo = ScratchRepo(tmp_path_factory.mktemp("repo"))
    path = write_run(repo, f"python -m runtime.train {CONFIG}")
    [job] = resolve_all(load_spec(path, repo.root), Catalog(repo.root))
    return repo.root, job


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk=st.lists(overrides(), min_size=1, max_size=3))
@example(junk=[")"])  # quoted by shlex.join: an argument, not the shell's operator
def test_any_override_is_a_located_problem_or_valid(
        tiny_job: tuple[Path, ResolvedJob], junk: list[str]) -> None:
    root, job = tiny_job
    cmd = shlex.join(["python", "-m", "runtime.train", CONFIG, *junk])
    report = check_training(root, [replace(job, spec=job.spec.model_copy(update={"cmd": cmd}))])
    assert report.checked == 1
    for problem in report.problems:
        assert problem.file in (SPEC, CONFIG) and problem.line is not None, problem


