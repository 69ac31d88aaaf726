"""The Typer application shared by every command module, and the error boundary."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape

from generator.errors import GkrError
from runtime.errors import RuntimeFailure

app = typer.Typer(
    name="gkr",
    help="GKR: render, validate and run training jobs on GKE with Ray.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)


def main() -> None:
    """Console-script entry point: the library's and the runtime's typed errors become a
    message (never a traceback) and the exit code of their category."""
    try:
        app()
    except (GkrError, RuntimeFailure) as error:
        err_console.print(f"[bold red]error:[/] {escape(str(error))}", markup=True)
        sys.exit(error.exit_code if isinstance(error, GkrError) else int(error.category))
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
