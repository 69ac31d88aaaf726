"""The Typer application shared by every command module, and the error boundary.

Kept light on purpose: `gkr --help` and TAB completion import this module, typer and the
command modules' signatures only. Each command imports the library it calls in its body.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from generator.errors import GkrError
from runtime.errors import RuntimeFailure

if TYPE_CHECKING:
    from rich.console import Console

CANCELLED = 130
"""Exit code of a command the user stopped: Ctrl-C, or a confirmation answered no or closed."""

app = typer.Typer(
    name="gkr",
    help="GKR: render, validate and run training jobs on GKE with Ray.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    rich_markup_mode=None,
)
RootOption = Annotated[
    Path | None, typer.Option("--root", help="Repository root (default: found from the cwd).")
]


class Printer:
    """Prints text verbatim to stdout or stderr: never Rich markup, emoji codes or wrapping,
    so `train[v2].yaml` or `image: "foo[/]"` print as written. Rich renderables (a table on a
    terminal) go through a Rich console made on first use, so plain commands never import Rich.
    """

    def __init__(self, stderr: bool = False) -> None:
        self.stderr = stderr

    @property
    def stream(self) -> TextIO:
        # Looked up at each call: test runners and `contextlib.redirect_stdout` swap it.
        return sys.stderr if self.stderr else sys.stdout

    def is_terminal(self) -> bool:
        return self.stream.isatty()

    def print(self, *values: object, end: str = "\n") -> None:
        if all(isinstance(value, str) for value in values):
            self.stream.write(" ".join(str(value) for value in values) + end)
        else:
            self.rich().print(*values, end=end)

    def rich(self) -> Console:
        from rich.console import Console

        return Console(file=self.stream, highlight=False, markup=False, emoji=False,
                       soft_wrap=True)


err_console = Printer(stderr=True)
out_console = Printer()


def color(text: str, code: str, stream: TextIO) -> str:
    """`text` in an ANSI colour on a terminal (unless NO_COLOR is set), else as it is."""
    if not stream.isatty() or "NO_COLOR" in os.environ:
        return text
    return f"\x1b[{code}m{text}\x1b[0m"


def confirm(question: str) -> bool:
    """Ask yes/no; Ctrl-C or the end of input cancels the command (exit code 130)."""
    try:
        return typer.confirm(question)
    except typer.Abort:
        raise typer.Exit(CANCELLED) from None


def cancelled(what: str) -> typer.Exit:
    """The exit of a command whose confirmation the user declined."""
    err_console.print(f"cancelled: {what}")
    return typer.Exit(CANCELLED)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        out_console.print(f"gkr {version('gkr')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
    "--version", help="Print gkr's version and exit.", is_eager=True, callback=_version,
)] = False) -> None:
    """GKR: render, validate and run training jobs on GKE with Ray."""


def report(error: GkrError | RuntimeFailure) -> int:
    """Print a typed error as `error: message` and return its category's exit code."""
    prefix = color("error:", "1;31", sys.stderr)
    err_console.print(f"{prefix} {error}")
    return error.exit_code if isinstance(error, GkrError) else int(error.category)


def main() -> None:
    """Console-script entry point: the library's and the runtime's typed errors become a
    message (never a traceback) and the exit code of their category."""
    _lazy_coercion()
    _quick_exit()
    try:
        with _only_invoked(app, sys.argv[1:]):
            app(prog_name="gkr")
    except (GkrError, RuntimeFailure) as error:
        sys.exit(report(error))
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(CANCELLED)


@contextmanager
def _only_invoked(typer_app: typer.Typer, argv: list[str]) -> Iterator[None]:
    """While `gkr COMMAND …` runs, the app holds that command alone. Typer builds the Click
    command of every registered command (signatures, type hints) on each run, ~15 ms for
    all of gkr's; a command's own parsing, help and errors are the same without its
    siblings. Anything else (`gkr`, `gkr --help`, a group, a misspelled command, TAB
    completion) gets the whole app."""
    from typer.main import get_command_name

    name = argv[0] if argv and "_GKR_COMPLETE" not in os.environ else None
    found = [c for c in typer_app.registered_commands if name and c.callback
             and (c.name or get_command_name(c.callback.__name__)) == name]
    if len(found) != 1:
        yield
        return
    commands, groups = typer_app.registered_commands, typer_app.registered_groups
    typer_app.registered_commands, typer_app.registered_groups = found, []
    try:
        yield
    finally:
        typer_app.registered_commands, typer_app.registered_groups = commands, groups


def _quick_exit() -> None:
    """The interpreter's last garbage collection, at exit, walks every object a command made
    (the models' pydantic schemas, the rendered tree): ~40 ms of a one-spec `gkr render`, to
    free memory the process is about to give back whole. The objects alive at exit are
    frozen first (`gc.freeze`), so that collection skips them. Exit handlers run as before,
    and files are closed by `with` blocks, not by the collector."""
    global _EXIT_FREEZE
    if not _EXIT_FREEZE:
        atexit.register(gc.freeze)
        _EXIT_FREEZE = True


_EXIT_FREEZE = False


class _Unset:
    """typer's coercion of an option left unset: None (or () for a repeated one), which is
    what typer returns for it, without building its pydantic adapter first."""

    @staticmethod
    def coerce(value: object, param: Any, ctx: object) -> object:
        assert value is None
        return () if param.multiple or param.nargs == -1 else None


def _lazy_coercion() -> None:
    """typer builds a pydantic TypeAdapter for each option it processes, even one left at its
    default of None (`--root`, `--help`): ~15 ms per run and, for a command that needs no
    pydantic, the import of pydantic. Unset options skip it; given ones are coerced by
    typer as before. A typer without this hook is left alone."""
    try:
        from typer.core import _TyperParameter
    except ImportError:
        return
    process = getattr(_TyperParameter, "process_value", None)
    if process is None or getattr(process, "gkr_lazy", False) \
            or not hasattr(_TyperParameter, "get_runtime_param"):
        return

    def process_value(self: Any, ctx: Any, value: Any) -> Any:
        if value is None and getattr(self, "_runtime_param", False) is None:
            self._runtime_param = _Unset()
            try:
                return process(self, ctx, value)
            finally:
                self._runtime_param = None
        return process(self, ctx, value)

    process_value.gkr_lazy = True  # type: ignore[attr-defined]
    _TyperParameter.process_value = process_value  # type: ignore[method-assign]
