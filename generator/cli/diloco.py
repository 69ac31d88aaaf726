"""`gkr diloco keys SPEC`: a DiLoCo experiment's CURVE keys as Kubernetes Secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from generator.cli._app import app, out_console

diloco_app = typer.Typer(help="DiLoCo experiments: the keys of their authenticated link.",
                         no_args_is_help=True)
app.add_typer(diloco_app, name="diloco")


@diloco_app.command()
def keys(
    spec_file: Annotated[Path, typer.Argument(help="The experiment's spec (jobs/TEAM/NAME.yaml).")],
    rotate: Annotated[bool, typer.Option(
        "--rotate", help="Replace existing keys with new ones (then restart the experiment)."
    )] = False,
) -> None:
    """Make the experiment's CURVE keys and create one Secret per part on its cluster: the
    synchroniser's (its secret key, the learners' public keys) and each learner's (its
    secret key, the synchroniser's public key). The keys never reach the repository."""
    from generator.cluster.diloco_keys import experiment_keys
    from generator.repo import find_root

    for secret in experiment_keys(find_root(), spec_file, rotate):
        out_console.print(f"secret {secret.namespace}/{secret.name} on {secret.context}")
