"""The training configs that job specs run, composed and validated as the driver will.

A job whose cmd is `[uv run] python -m runtime.train CONFIG [overrides]` runs CONFIG from its
working directory, which is a copy of this repository: the image's `working_dir` (the
trainer image holds the repository there) or the archive `gkr submit --working-dir` ships.
So CONFIG is read relative to the repository root, composed with the cmd's overrides and
the deployment's settings (a DiLoCo learner's `GKR_DILOCO`) through runtime.train.compose,
exactly as `python -m runtime.train` does, and validated. Each bad field is a problem where
it was set: the spec's cmd line when the cmd sets it, the line of that key in the config
file (or in a file its `defaults` name) when a file sets it, else the cmd line.

Not checked, but counted: a config missing from the repository when the job's code is not
this repository's copy (a remote archive, or no working_dir: the image's own directory), an
absolute CONFIG outside the working_dir, and a cmd that runs runtime.train inside a longer
shell line. Components (`_target_` sections) are checked by the driver before any rank
starts (runtime.train.check): that imports torch and every target, which this does not.
"""

from __future__ import annotations

import multiprocessing
import re
import shlex
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

import runtime.configs
from generator.errors import InvalidInput, Problem
from generator.placement import display_path
from generator.resolve import ResolvedJob
from generator.yamlio import FieldPath, LineMap, line_of, load_document, read_input, refusal
from runtime.diloco.config import with_deployment
from runtime.errors import ConfigError, FieldProblem
from runtime.procs import die_with_parent

MODULE = "runtime.train"
USAGE = "python -m runtime.train CONFIG.yaml [key=value ...]"
# Shell operators: a cmd holding one runs more than the driver, so it is not parsed here.
OPERATOR = re.compile(r"^[;&|()<>]+$")
PYTHON = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")
PACKAGED = Path(runtime.configs.__file__).parent  # Hydra's pkg://runtime.configs


@dataclass
class TrainingReport:
    """What the check found: problems, and how many distinct runs it composed or could not."""

    problems: list[Problem] = field(default_factory=list)
    checked: int = 0
    unchecked: int = 0


def train_argv(cmd: str) -> list[str] | None:
    """The arguments after `python -m runtime.train` when `cmd` is that command alone (under
    `uv run` or not); None when it is some other command."""
    try:
        words = _words(cmd, posix=True)
        # Quotes kept: a quoted `')'` is an argument, a bare `)` an operator.
        if any(OPERATOR.match(word) for word in _words(cmd, posix=False)):
            return None
    except ValueError:
        return None
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    if len(words) < 3 or not PYTHON.match(words[0]) or words[1:3] != ["-m", MODULE]:
        return None
    return words[3:]


def _words(cmd: str, posix: bool) -> list[str]:
    lexer = shlex.shlex(cmd, posix=posix, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, "#"
    return list(lexer)


def check_training(root: Path, jobs: Iterable[ResolvedJob]) -> TrainingReport:
    """Compose and validate every distinct run the jobs' cmds start."""
    runs, unchecked = training_runs(root, jobs)
    report = check_runs(root, runs)
    report.unchecked += unchecked
    return report


def start_training_check(root: Path, jobs: Iterable[ResolvedJob]) -> Callable[[], TrainingReport]:
    """check_training in a forked process, while the caller checks the rendered tree: Hydra
    composes in pure Python (~0.2 s a run) and imports the config models (~0.4 s), so on a
    second core the composition costs `gkr validate` no time. Call the result to wait."""
    runs, unchecked = training_runs(root, jobs)
    if not runs:
        return lambda: TrainingReport(unchecked=unchecked)
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                               initializer=die_with_parent)
    future = pool.submit(check_runs, root, runs)

    def finish() -> TrainingReport:
        try:
            report = future.result()
        finally:
            pool.shutdown()
        report.unchecked += unchecked
        return report

    return finish


def training_runs(root: Path, jobs: Iterable[ResolvedJob]) -> tuple[list[_Run], int]:
    """The distinct runs the jobs start, and how many cmds run the driver unrecognised."""
    runs: dict[tuple[object, ...], _Run] = {}
    unrecognised = 0
    for job in jobs:
        run = _run_of(root, job)
        if run is not None:
            runs.setdefault(run.key, run)
        elif job.spec.cmd and MODULE in job.spec.cmd:
            unrecognised += 1
    return list(runs.values()), unrecognised


def check_runs(root: Path, runs: Iterable[_Run]) -> TrainingReport:
    """Compose and validate each run (a run whose config is not here counts as unchecked)."""
    report, composed = TrainingReport(), _Composed()
    for run in runs:
        found = run.check(root, composed)
        if found is None:
            report.unchecked += 1
        else:
            report.checked += 1
            report.problems += found
    return report


@dataclass(frozen=True)
class _Run:
    """One training run a job starts: its spec's cmd line, CONFIG and the deployment."""

    spec: str  # the spec file as messages name it
    cmd_line: int | None
    argv: tuple[str, ...]
    working_dir: str | None
    environ: tuple[tuple[str, str], ...]

    @property
    def key(self) -> tuple[object, ...]:
        return self.spec, self.argv, self.working_dir, self.environ

    def at_cmd(self, message: str) -> Problem:
        return Problem(self.spec, self.cmd_line, "cmd", message)

    def check(self, root: Path, composed: _Composed) -> list[Problem] | None:
        """The run's problems; None when its config cannot be read here."""
        if not self.argv or self.argv[0].startswith("-"):
            return [self.at_cmd(f"names no config file; usage: {USAGE}")]
        path = self.config_path(root)
        if path is None or (not (path.exists() or path.is_symlink()) and self.elsewhere):
            return None
        why = refusal(path, root)
        if why is not None:
            return [self.at_cmd(f"{self.argv[0]}: {why} (CONFIG is read from the repository "
                                "root, the job's working directory)")]
        try:
            return _Composition(self, root, path, composed).problems()
        except InvalidInput as error:  # a file of the config that is not valid YAML
            return error.problems

    @property
    def elsewhere(self) -> bool:
        """The job's code may not be this repository's: a remote archive, or the image's."""
        return self.working_dir is None or "://" in self.working_dir

    def config_path(self, root: Path) -> Path | None:
        """CONFIG in the repository: relative to its root, or absolute inside working_dir."""
        config = PurePosixPath(self.argv[0])
        if not config.is_absolute():
            return root / config
        base = PurePosixPath(self.working_dir or "/nowhere")
        return root / config.relative_to(base) if config.is_relative_to(base) else None


def _run_of(root: Path, job: ResolvedJob) -> _Run | None:
    argv = train_argv(job.spec.cmd) if job.spec.cmd else None
    if argv is None:
        return None
    return _Run(job.source, _cmd_line(root, job.source), tuple(argv), job.spec.working_dir,
                tuple(sorted(job.gkr_env.items())))


def _cmd_line(root: Path, spec: str) -> int | None:
    """The line of the spec's `cmd` (the spec already rendered, so it reads and parses)."""
    try:
        _, lines = load_document(spec, read_input(root / spec, root, spec, anywhere=True))
    except InvalidInput:
        return None
    return lines.get(("cmd",))


class _Composed:
    """Compositions of one check, by file and overrides: the learners of a DiLoCo experiment
    run one command, and differ only in what the deployment adds."""

    def __init__(self) -> None:
        self.done: dict[tuple[Path, tuple[str, ...]], dict[Any, Any]] = {}

    def __call__(self, path: Path, overrides: list[str]) -> dict[Any, Any]:
        from runtime.train.compose import compose_raw

        key = (path, tuple(overrides))
        if key not in self.done:
            self.done[key] = compose_raw(path, overrides)
        return self.done[key]


@dataclass(frozen=True)
class _Source:
    """A file that sets values of the composed config, at `prefix` (its package)."""

    display: str
    lines: LineMap
    prefix: FieldPath = ()

    def line(self, loc: FieldPath, exact: bool) -> int | None:
        if loc[:len(self.prefix)] != self.prefix:
            return None
        rest = loc[len(self.prefix):]
        return self.lines.get(rest) if exact else line_of(self.lines, rest)


class _Composition:
    """One run's config composed, validated, and its problems located."""

    def __init__(self, run: _Run, root: Path, path: Path, composed: _Composed) -> None:
        self.run, self.path, self.composed = run, path, composed
        self.config = run.argv[0]
        self.overrides = list(run.argv[1:])
        self.primary, data = _parse(path, root)
        self.sources = _by_precedence(self.primary, data, path.parent, root)
        self.set_by_cmd = [p for text in self.overrides if (p := _override_path(text))]

    def problems(self) -> list[Problem]:
        from runtime.run.config import build_config  # the config models: ~0.4 s to import

        try:
            build_config(self.compose(self.overrides), source=self.config)
        except ConfigError as error:
            if error.field == "overrides" or not any(p.loc for p in error.problems):
                return [self.composing(error.message)]
            return [self.locate(problem) for problem in error.problems]
        except _compose_errors() as error:
            return [self.composing(_first_line(error))]
        return []

    def compose(self, overrides: list[str]) -> dict[Any, Any]:
        """As `python -m runtime.train` composes: the file, the overrides, the deployment."""
        return with_deployment(self.composed(self.path, overrides), dict(self.run.environ))

    def composing(self, message: str) -> Problem:
        """A failure to compose: the config's own when it fails without the overrides too."""
        if self.overrides and self._composes_alone():
            return self.run.at_cmd(f"{self.config}: {message}")
        return Problem(self.primary.display, self._line_in_file(message), "", message)

    def _composes_alone(self) -> bool:
        try:
            self.compose([])
        except _compose_errors():
            return False
        return True

    def _line_in_file(self, message: str) -> int | None:
        """The line a composition error names: the key it resolved, or the defaults list."""
        key = re.search(r"full_key: (\S+)", message)
        if key:
            return line_of(self.primary.lines, _key_path(key.group(1)))
        return self.primary.lines.get(("defaults",))

    def locate(self, problem: FieldProblem) -> Problem:
        """At the cmd when it sets the field (or one around or under it); else at the line
        of the file whose value wins; else the primary file's nearest key; else the cmd."""
        loc = problem.loc
        if not any(_overlap(loc, path) for path in self.set_by_cmd):
            for exact, candidates in ((True, self.sources), (False, [self.primary])):
                for source in candidates:
                    line = source.line(loc, exact)
                    if line is not None:
                        return Problem(source.display, line, problem.field, problem.message)
        text = f"{problem.field}: {problem.message}" if problem.field else problem.message
        return self.run.at_cmd(f"{self.config}: {text}")


def _compose_errors() -> tuple[type[Exception], ...]:
    """What Hydra or OmegaConf raise on a config or an override they cannot compose:
    compose_raw wraps some in ConfigError; resolution and YAML errors come as they are."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return (ConfigError, HydraException, OmegaConfBaseException, yaml.YAMLError, ValueError,
            TypeError, KeyError)


def _overlap(loc: FieldPath, path: FieldPath) -> bool:
    return bool(loc) and (loc[:len(path)] == path or path[:len(loc)] == loc)


def _read(path: Path, prefix: FieldPath, root: Path) -> _Source:
    return _parse(path, root, prefix)[0]


def _parse(path: Path, root: Path, prefix: FieldPath = ()) -> tuple[_Source, Any]:
    """The file's lines (and data): a YAML error is a problem at its line, as for specs."""
    display = display_path(path, root)
    data, lines = load_document(display, read_input(path, root, display, anywhere=True))
    return _Source(display, lines, prefix), data


def _by_precedence(primary: _Source, data: Any, folder: Path, root: Path) -> list[_Source]:
    """The primary file and the files its `defaults` list names, the one whose value wins
    first: Hydra merges the list in order, the primary file where `_self_` stands (at the
    end when it is not listed)."""
    entries = data.get("defaults") if isinstance(data, dict) else None
    entries = entries if isinstance(entries, list) else []
    own = entries.index("_self_") if "_self_" in entries else len(entries)
    files = [(i, _read(*found, root)) for i, entry in enumerate(entries)
             if (found := _entry_file(entry, folder)) is not None]
    after = [source for i, source in reversed(files) if i > own]
    before = [source for i, source in reversed(files) if i < own]
    return [*after, primary, *before]


def _entry_file(entry: object, folder: Path) -> tuple[Path, FieldPath] | None:
    """A defaults entry's file (the config's folder first, then the packaged configs, as
    Hydra's search path orders them) and its package, as a field path."""
    if isinstance(entry, dict) and len(entry) == 1:
        ((key, value),) = entry.items()
        if not isinstance(key, str) or not isinstance(value, str):
            return None
        group, _, package = key.removeprefix("optional ").removeprefix("override ") \
            .lstrip("/").partition("@")
        name = f"{group}/{value}"
    elif isinstance(entry, str) and entry != "_self_":
        name, package = entry.lstrip("/"), ""
        group = name.rpartition("/")[0]
    else:
        return None
    if group.split("/")[0] == "hydra":
        return None
    prefix = () if package == "_global_" else _key_path(package or group.replace("/", "."))
    for base in (folder, PACKAGED):
        if (base / f"{name}.yaml").is_file():
            return base / f"{name}.yaml", prefix
    return None


def _override_path(text: str) -> FieldPath | None:
    """The field an override sets (`+a.b=1`, `~a`, `group@pkg=name`), as a path."""
    key = text.lstrip("+~").split("=", 1)[0].strip()
    group, _, package = key.partition("@")
    path = _key_path(package or group.replace("/", "."))
    return path or None


def _key_path(dotted: str) -> FieldPath:
    return tuple(int(part) if part.isdigit() else part
                 for part in re.findall(r"[^.\[\]]+", dotted))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return " ".join(text.splitlines()[:2]) if text else type(error).__name__
