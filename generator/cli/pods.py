"""`gkr shell/cp/port-forward`: into a job's pods through kubectl (generator.cluster.access)."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli._app import app
from generator.cli.cluster import ClusterOption, ConsoleEvents, NamespaceOption, asked


@app.command()
def shell(
    name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
    rank: Annotated[int | None, typer.Option(help="Worker rank.")] = None,
    command: Annotated[str, typer.Option(help="Shell to start.")] = "/bin/bash",
    accelerator: Annotated[str | None, typer.Option(
        "--accelerator", "--accelerators",
        help="For a new development pod: accelerator type (none: a CPU pod).")] = None,
    gpus: Annotated[int | None, typer.Option(help="For a new development pod: GPUs.")] = None,
    image: Annotated[str, typer.Option(
        "--image", "--docker-image", help="For a new development pod: image.")] = "devbox",
    owner: Annotated[str | None, typer.Option(
        help="For a new development pod: owner e-mail (default: git config user.email).")
    ] = None,
    deadline: Annotated[str, typer.Option(help="For a new development pod: lifetime.")] = "8h",
    timeout: Annotated[int, typer.Option(help="Seconds to wait for a new pod.")] = 900,
) -> None:
    """Open a shell in a job's pod; without such a job, first start a development pod
    (a Job running `sleep infinity` until its deadline) and wait for it."""
    from generator.cluster.access import DevPod, ShellRequest
    from generator.cluster.access import shell as run

    dev = DevPod(accelerator, gpus, image, owner, deadline)
    request = ShellRequest(asked(name, cluster, namespace), rank, command, dev, timeout)
    raise typer.Exit(run(request, ConsoleEvents()))


@app.command()
def cp(name: str, source: str, destination: str, cluster: ClusterOption = None,
       namespace: NamespaceOption = None,
       rank: Annotated[int | None, typer.Option(help="Worker rank.")] = None) -> None:
    """Copy files to or from a job's pod; write the pod side as `:PATH`."""
    from generator.cluster.access import PodRequest, copy

    copy(PodRequest(asked(name, cluster, namespace), rank=rank), source, destination)


@app.command("port-forward")
def port_forward(name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
                 service: Annotated[str, typer.Option(help="dashboard, client or gcs.")
                                    ] = "dashboard",
                 local_port: Annotated[int | None, typer.Option(help="Local port.")] = None,
                 ) -> None:
    """Forward a Ray head service (the dashboard by default) to localhost."""
    from generator.cluster.access import port_forward as run

    raise typer.Exit(run(asked(name, cluster, namespace), service, local_port))
