"""`gkr list/status/logs/delete`: thin commands over `generator.cluster` (flags -> frozen
request -> one call -> print)."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli._app import app, cancelled, out_console
from generator.cli._output import Output, OutputOption, age, emit
from generator.cli.cluster import ClusterOption, ForceOption, NamespaceOption, asked

JOB_COLUMNS = {"name": "NAME", "kind": "KIND", "namespace": "NAMESPACE", "phase": "PHASE",
               "created": "AGE", "owner": "OWNER"}


@app.command("list")
def list_command(
    cluster: ClusterOption = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="Namespace (default: every team namespace of the cluster).")
    ] = None,
    output: OutputOption = Output.table,
) -> None:
    """Jobs that gkr submitted, with phase, age and owner."""
    from generator.cluster.status import list_in

    listed = list_in(asked(None, cluster, namespace))
    emit([r.model_dump() for r in listed.rows], output, JOB_COLUMNS,
         title=f"jobs on {listed.cluster}",
         empty=f"No resources found on {listed.cluster} in {', '.join(listed.namespaces)}.")


@app.command()
def status(name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
           output: OutputOption = Output.table) -> None:
    """Phase, pods with their nodes, pending reasons from events, Kueue admission, age, a
    rayjob's preflight result and a raycluster's sentinel report."""
    from generator.cluster.status import preflight_line, status_of

    report = status_of(asked(name, cluster, namespace))
    if output is not Output.table:
        emit([report.model_dump()], output)
        return
    since = age(report.created) if report.created else "unknown"
    out_console.print(f"{report.kind} {report.namespace}/{report.name}: {report.phase}, "
                      f"age {since}, Kueue: {report.admission}")
    emit([p.model_dump() for p in report.pods], output, title="pods", empty="no pods yet")
    for reason in report.pending:
        out_console.print(f"  pending: {reason}")
    if report.preflight is not None:
        out_console.print(f"preflight: {preflight_line(report.preflight)}")
        for suspect in report.preflight.suspects:
            out_console.print(f"  suspect: {suspect.node} (pod {suspect.pod}): {suspect.reason}")
    if report.sentinel is not None:  # its words: runtime.sentinel.HeadReport.summary
        out_console.print(f"sentinel at {report.sentinel['time']}: "
                          f"{report.sentinel.get('summary', '')}")


@app.command()
def logs(
    name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Stream new lines.")] = False,
    pod: Annotated[str | None, typer.Option("--pod", help="Pod name.")] = None,
    rank: Annotated[int | None, typer.Option("--rank", help="Worker rank.")] = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Last N lines.")] = None,
) -> None:
    """Logs of a job's head (or Job pod), a named pod, or a worker by rank."""
    from generator.cluster.jobs import LogsRequest, job_logs

    for line in job_logs(LogsRequest(asked(name, cluster, namespace), follow, pod, rank, tail)):
        print(line, flush=True)


@app.command()
def delete(
    name: str, cluster: ClusterOption = None, namespace: NamespaceOption = None,
    raycluster: Annotated[bool, typer.Option(
        "--raycluster", help="Required to delete a persistent RayCluster and its sentinel.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    force: ForceOption = False,
) -> None:
    """Delete a job; a persistent RayCluster only with --raycluster and confirmation; a job
    Argo CD manages only with --force (delete its spec in a pull request instead)."""
    from generator.cli._app import confirm
    from generator.cluster.jobs import DeleteRequest
    from generator.cluster.jobs import delete as run

    done = run(DeleteRequest(asked(name, cluster, namespace), raycluster, yes, force), confirm)
    if not done.done:
        raise cancelled(f"{done.kind} {done.namespace}/{done.name} kept")
    out_console.print(f"deleted {done.kind} {done.namespace}/{done.name}")
