"""`gkr run --local`: run a training job on the embedded default, a local Ray instance."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from generator.cli._app import app, out_console
from generator.errors import BadRequest, InvalidInput, Problem
from generator.repo import find_root

T = TypeVar("T")
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
    diloco: Annotated[int, typer.Option(
        "--diloco", min=0, metavar="LEARNERS", help="A DiLoCo experiment: this many learners, "
        "each a training run on its own local Ray, and a synchroniser, on loopback."
    )] = 0,
) -> None:
    """Run a training job: plan capacity, start auxiliary services, train, report."""
    if not local:
        raise BadRequest("only --local is supported by `gkr run`; use `gkr submit` for clusters")
    config_path, spec_overrides = _training_command(target)
    if diloco:
        run_local_diloco(config_path, [*spec_overrides, *(overrides or [])], diloco)
    else:
        spec = target if target is not None and config_path != target else None
        run_local(config_path, [*spec_overrides, *(overrides or [])], spec)


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


def run_local(config_path: Path, overrides: list[str], spec: Path | None = None) -> None:
    """Compose, adapt to this machine, train on a local Ray, print the results; a crash
    bundle records the config, the overrides and the spec (`spec`) the run came from."""
    from runtime.crash.launch import Launch
    from runtime.errors import ConfigError
    from runtime.train.compose import compose_raw, load_config
    from runtime.train.driver import run_training
    from runtime.train.local import LOCAL_DEFAULTS, gpus_present, local_overrides

    try:
        requested = [*LOCAL_DEFAULTS, *overrides]
        raw = compose_raw(config_path, requested)
        config = load_config(config_path, [*requested, *local_overrides(raw, gpus_present())])
        out_console.print(f"running {config_path} locally (run {config.run.name})")
        launch = Launch(str(config_path.absolute()), tuple(overrides),
                        *_spec_files(spec))
        result = run_training(config, echo=out_console.print, launch=launch)
    except ConfigError as error:
        raise InvalidInput([Problem(error.source, None, found.field, found.message)
                            for found in error.problems]) from error
    _print_result(result)


def _spec_files(spec: Path | None) -> tuple[str | None, str | None]:
    """The spec and its rendered manifest, for the crash bundle (None where there is none)."""
    if spec is None:
        return None, None
    try:
        from generator.catalog import Catalog
        from generator.paths import job_file
        from generator.specs import load_spec

        root = find_root(spec.parent)
        job = load_spec(spec.absolute(), root).spec
        cluster = Catalog(root).clusters[job.cluster]
        team = spec.absolute().parent.name
        namespace = job.namespace or cluster.teams[team].namespace
        manifest = root / job_file(job.cluster, namespace, job.name)
    except Exception:  # the bundle is evidence, not a gate: a spec it cannot place is left out
        return str(spec.absolute()), None
    return str(spec.absolute()), str(manifest) if manifest.is_file() else None


def run_local_diloco(config_path: Path, overrides: list[str], learners: int) -> None:
    """The learners and the synchroniser as local processes; fails when any of them does."""
    from runtime.diloco import DilocoError
    from runtime.diloco.local import run_experiment
    from runtime.train.compose import load_config

    argv = _local_argv(config_path, overrides)
    config = _checked(lambda: load_config(config_path, argv[1:]))
    section = config.diloco
    out_console.print(f"running {config_path} locally as a DiLoCo experiment (run "
                      f"{config.run.name}, {learners} learners, H = {section.inner_steps}, "
                      f"{section.mode} mode)")
    outcome = run_experiment(config, argv, learners, out_console.print)
    if not outcome.ok:
        failed = ", ".join(f"{name} (exit {code})" for name, code in outcome.codes.items() if code)
        raise DilocoError(f"the DiLoCo experiment failed: {failed}; their output is above")
    out_console.print(f"DiLoCo experiment {config.run.name} finished: {learners} learners")


def _local_argv(config_path: Path, overrides: list[str]) -> list[str]:
    """`CONFIG key=value ...` of every local learner, adapted to this machine as `run_local`
    adapts a run."""
    from runtime.train.compose import compose_raw
    from runtime.train.local import LOCAL_DEFAULTS, gpus_present, local_overrides

    requested = [*LOCAL_DEFAULTS, *overrides]
    raw = _checked(lambda: compose_raw(config_path, requested))
    return [str(config_path), *requested, *local_overrides(raw, gpus_present())]


def _checked(make: Callable[[], T]) -> T:
    """A configuration's problems as gkr's invalid-input error."""
    from runtime.errors import ConfigError

    try:
        return make()
    except ConfigError as error:
        raise InvalidInput([Problem(error.source, None, found.field, found.message)
                            for found in error.problems]) from error


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
