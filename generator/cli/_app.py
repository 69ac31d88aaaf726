"""The Typer application shared by every command module, and the error boundary."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from generator.errors import GkrError

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
    """Console-script entry point: user mistakes become messages and exit codes."""
    try:
        app()
    except GkrError as error:
        err_console.print(f"[bold red]error:[/] {error}", markup=True)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
