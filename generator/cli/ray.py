"""`gkr ray submit/jobs/logs/stop/scale NAME`: work on a running persistent RayCluster
(generator.cluster.rayjobs, generator.cluster.scale), as kubectl-ray's `job submit`, `log`
and `scale` do."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from generator.cli._app import app, err_console, out_console
from generator.cli._output import Output, OutputOption, emit
from generator.cli.cluster import ClusterOption, ForceOption, NamespaceOption, asked

if TYPE_CHECKING:
    from generator.cluster.rayjobs import HeadRequest

ray_app = typer.Typer(help="A running RayCluster: submit jobs to it, list, read and stop them, "
                      "scale it.", no_args_is_help=True)
app.add_typer(ray_app, name="ray")

NameArgument = Annotated[str, typer.Argument(help="The RayCluster (a raycluster job's name).")]
JobArgument = Annotated[str, typer.Argument(help="The Ray job's submission id.")]
AddressOption = Annotated[str | None, typer.Option(
    "--address", help="The head's dashboard URL, e.g. http://NAME-head-svc.NS.svc:8265 from "
    "inside the cluster (default: a port-forward to the head pod, opened and closed by gkr).")]
RAY_JOB_COLUMNS = {"id": "ID", "status": "STATUS", "created": "AGE", "entrypoint": "ENTRYPOINT",
                   "message": "MESSAGE"}


def _head(name: str, cluster: str | None, namespace: str | None,
          address: str | None) -> HeadRequest:
    from generator.cluster.rayjobs import HeadRequest

    return HeadRequest(asked(name, cluster, namespace), address)


@ray_app.command("submit")
def submit(
    name: NameArgument,
    cmd: Annotated[str, typer.Option(help="Command the job runs (a shell line).")],
    working_dir: Annotated[str | None, typer.Option(
        help="Local folder to ship (zipped by Ray's job API), or a URI.")] = None,
    env: Annotated[Path | None, typer.Option(
        "--env-file", "--env", help="YAML file of environment variables.")] = None,
    job_id: Annotated[str | None, typer.Option(
        "--id", help="Submission id (default: NAME-<random>); also the run id, GKR_RUN.")] = None,
    cluster: ClusterOption = None, namespace: NamespaceOption = None,
    address: AddressOption = None,
) -> None:
    """Submit a job to a running RayCluster; prints its submission id."""
    from generator.cluster.rayjobs import RayJobRequest, submit_to

    head = _head(name, cluster, namespace, address)
    out_console.print(submit_to(RayJobRequest(head, cmd, working_dir, env, job_id)))


@ray_app.command("jobs")
def jobs(name: NameArgument, cluster: ClusterOption = None, namespace: NamespaceOption = None,
         address: AddressOption = None, output: OutputOption = Output.table) -> None:
    """The jobs submitted to a RayCluster, with their states."""
    from dataclasses import asdict

    from generator.cluster.rayjobs import list_ray_jobs

    rows = list_ray_jobs(_head(name, cluster, namespace, address))
    emit([asdict(row) for row in rows], output, RAY_JOB_COLUMNS, title=f"jobs on {name}",
         empty=f"No jobs submitted to {name}.")


@ray_app.command("logs")
def logs(
    name: NameArgument, job: JobArgument,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream until it ends.")] = False,
    save: Annotated[Path | None, typer.Option(
        "--output-file", "-O", help="Download the log to this file instead.")] = None,
    cluster: ClusterOption = None, namespace: NamespaceOption = None,
    address: AddressOption = None,
) -> None:
    """A Ray job's log: what it printed so far, streamed (-f), or downloaded (-O FILE)."""
    from generator.cluster.rayjobs import ray_job_log

    chunks = ray_job_log(_head(name, cluster, namespace, address), job, follow)
    if save is None:
        for chunk in chunks:
            print(chunk, end="", flush=True)
        return
    with save.open("w", encoding="utf-8") as handle:
        for chunk in chunks:
            handle.write(chunk)
    out_console.print(f"wrote {save}")


@ray_app.command("stop")
def stop(name: NameArgument, job: JobArgument, cluster: ClusterOption = None,
         namespace: NamespaceOption = None, address: AddressOption = None) -> None:
    """Stop a Ray job (one that already ended is left as it ended)."""
    from generator.cluster.rayjobs import stop_ray_job

    status = stop_ray_job(_head(name, cluster, namespace, address), job)
    out_console.print(f"{job}: {status}")


@ray_app.command("scale")
def scale(
    name: NameArgument,
    replicas: Annotated[int, typer.Option("--replicas", help="Worker pods to have.")],
    group: Annotated[str, typer.Option(help="Worker group.")] = "workers",
    cluster: ClusterOption = None, namespace: NamespaceOption = None,
    force: ForceOption = False,
) -> None:
    """Set a RayCluster's worker replicas, within its node pool (the catalog) and Kueue's
    free quota; Warden's own resize path. An Argo CD-managed one only with --force."""
    from generator.cluster.scale import ResizeRequest, resize

    done = resize(ResizeRequest(asked(name, cluster, namespace), replicas, group, force))
    for note in done.notes:
        err_console.print(note)
    out_console.print(f"scaled RayCluster {done.namespace}/{done.name} group {done.group}: "
                      f"{done.before} -> {done.replicas} workers ({done.gpus} GPUs)")
