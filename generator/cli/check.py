"""`gkr check`: the preflight suite on nodes (as Jobs) or on this machine."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from generator.cli._app import app, err_console, out_console
from generator.cli._output import Output, OutputOption, emit
from generator.cli.cluster import complete_clusters, repo_root


@app.command()
def check(
    nodes: Annotated[list[str] | None, typer.Argument(help="Nodes to check.")] = None,
    local: Annotated[bool, typer.Option("--local", help="Run the suite on this machine.")] = False,
    cluster: Annotated[str | None, typer.Option(
        autocompletion=complete_clusters,
        help="Cluster of the nodes (default: the one whose kube_context is current).")] = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="Namespace of the check Jobs (default: the catalog's).")
    ] = None,
    accelerator: Annotated[str | None, typer.Option(
        help="The nodes' accelerator (catalog name), instead of reading their labels.")] = None,
    image: Annotated[str | None, typer.Option(
        help="Image with the runtime (default: the catalog's runtime image).")] = None,
    timeout: Annotated[int, typer.Option(help="Seconds to wait per node.")] = 900,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the Jobs only.")] = False,
    output: OutputOption = Output.table,
) -> None:
    """Run the preflight suite on nodes (as Jobs) or on this machine (--local)."""
    from generator.cluster.checks import CheckRequest, raise_if_failed
    from generator.cluster.checks import check as run

    request = CheckRequest(repo_root(), tuple(nodes or ()), local, cluster, namespace,
                           accelerator, image, timeout, dry_run)
    done = run(request, err_console.print)
    if dry_run and not local:
        import yaml

        print(yaml.safe_dump_all(done.jobs, sort_keys=False), end="")
        return
    print_results(done.results, output)
    raise_if_failed(done.results)


def print_results(results: list[dict[str, Any]], output: Output) -> None:
    """Preflight results: one row per finding, then each node's verdict and figures."""
    if output is not Output.table:
        return emit(results, output)
    rows = [{"node": r["node"], "check": f["check"], "severity": f["severity"],
             "message": f["message"]} for r in results for f in r["findings"]]
    emit(rows, output, title="preflight", empty="no findings")
    for r in results:
        out_console.print(f"{r['node']}: {'PASSED' if r['passed'] else 'FAILED'}  "
                          + "  ".join(f"{k}={v}" for k, v in r["figures"].items()))
    return None
