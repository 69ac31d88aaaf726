"""`gkr run --local`: run a training job on the embedded default, a local Ray instance."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from generator.cli._app import app, out_console
from generator.errors import BadRequest, InvalidInput, Problem
from generator.repo import find_root

DEFAULT_CONFIG = Path("examples/train/tiny.yaml")
ENTRY = "runtime.train"


@app.command()
def run(
    target: Annotated[Path | None, typer.Argument(
        help="A job spec (jobs/<team>/<name>.yaml) whose cmd runs `python -m runtime.train`, "
             "or a training config (default: examples/train/tiny.yaml)."
    )] = None,
    overrides: Annotated[list[str] | None, typer.Argument(
        help="Config overrides, key=value (Hydra syntax)."
    )] = None,
    local: Annotated[bool, typer.Option(
        "--local", help="Run on a local Ray instance on this machine (the embedded default)."
    )] = False,
) -> None:
    """Run a training job: plan capacity, start auxiliary services, train, report."""
    if not local:
        raise BadRequest("only --local is supported by `gkr run`; use `gkr submit` for clusters")
    config_path, spec_overrides = _training_command(target)
    run_local(config_path, [*spec_overrides, *(overrides or [])])


def _training_command(target: Path | None) -> tuple[Path, list[str]]:
    """The training config and overrides, from a config file or a job spec's cmd."""
    if target is None:
        return find_root() / DEFAULT_CONFIG, []
    if not target.is_file():
        raise InvalidInput([Problem(str(target), None, "", "file not found")])
    if not _is_job_spec(target):
        return target, []
    from generator.specs import load_spec

    root = find_root(target.parent)
    cmd = load_spec(target.absolute(), root).spec.cmd or ""  # a symlink out is refused
    argv = shlex.split(cmd)
    if ENTRY not in argv or argv.index(ENTRY) + 1 >= len(argv):
        raise InvalidInput([Problem(str(target), None, "cmd", f"does not run `python -m {ENTRY} "
                                    "CONFIG`; nothing to run locally")])
    config, *rest = argv[argv.index(ENTRY) + 1:]
    return _find_config(target, root, config), rest


def _is_job_spec(path: Path) -> bool:
    """A job spec rather than a training config: read with the bounded loader, whose
    mistakes are file:line errors (the user named this file, so it may live anywhere)."""
    from generator.yamlio import load_document, read_input

    text = read_input(path.absolute(), Path.cwd(), str(path), anywhere=True)
    data, _ = load_document(str(path), text)
    return isinstance(data, dict) and "kind" in data and "image" in data


def _find_config(spec: Path, root: Path, config: str) -> Path:
    for base in (spec.parent, root):
        if (base / config).is_file():
            return base / config
    raise InvalidInput([Problem(str(spec), None, "cmd", f"training config {config!r} is not in "
                                "this checkout (looked beside the spec and at the root)")])


def run_local(config_path: Path, overrides: list[str]) -> None:
    """Compose, adapt to this machine, train on a local Ray, print the results."""
    from runtime.errors import ConfigError
    from runtime.train.compose import compose_raw, load_config
    from runtime.train.driver import run_training
    from runtime.train.local import LOCAL_DEFAULTS, gpus_present, local_overrides

    try:
        requested = [*LOCAL_DEFAULTS, *overrides]
        raw = compose_raw(config_path, requested)
        config = load_config(config_path, [*requested, *local_overrides(raw, gpus_present())])
        out_console.print(f"running {config_path} locally (run {config.run.name})")
        result = run_training(config, echo=out_console.print)
    except ConfigError as error:
        raise InvalidInput([Problem(error.source, None, found.field, found.message)
                            for found in error.problems]) from error
    _print_result(result)


def _print_result(result: Any) -> None:
    losses = result.losses
    if not losses:  # resumed at or past run.steps: the driver has said so
        return
    first, last = min(losses), max(losses)
    out_console.print(f"run {result.run_id} finished: world size {result.plan.world_size}, "
                      f"loss {losses[first]:.5f} (step {first}) -> {losses[last]:.5f} "
                      f"(step {last})")
    for summary in result.fleet.values():
        out_console.print(f"fleet: {summary.line()}")
