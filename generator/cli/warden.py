"""`gkr warden status` and `gkr warden history NODE`: Warden's view of the fleet."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli._app import app
from generator.cli._output import Output, OutputOption, emit
from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Env

warden_app = typer.Typer(help="Warden, the GPU fleet health manager: node states and incidents.",
                         no_args_is_help=True)
app.add_typer(warden_app, name="warden")

AddressOpt = Annotated[str, typer.Option(help="Temporal frontend host:port.",
                                         envvar=Env.TEMPORAL_ADDRESS)]
NamespaceOpt = Annotated[str, typer.Option(help="Temporal namespace of Warden.",
                                           envvar=Env.TEMPORAL_NAMESPACE)]
KubeconfigOpt = Annotated[str | None, typer.Option(
    help="Kubeconfig to read node annotations from (omit to skip them).")]


@warden_app.command()
def status(address: AddressOpt = "localhost:7233",
           namespace: NamespaceOpt = WARDEN_TEMPORAL_NAMESPACE,
           kubeconfig: KubeconfigOpt = None, output: OutputOption = Output.table) -> None:
    """The latest incident phase of every node Warden has handled, and reserved nodes."""
    import asyncio

    from runtime.warden import view  # lazily: Temporal's client is slow to import

    rows = asyncio.run(view.fleet_report(view.Where(address, namespace, kubeconfig)))
    emit(rows, output, ["node", "phase", "status", "started", "recent_cordons",
                        "reserved_for", "reserved_until"])


@warden_app.command()
def history(node: Annotated[str, typer.Argument(help="Node name.")],
            address: AddressOpt = "localhost:7233",
            namespace: NamespaceOpt = WARDEN_TEMPORAL_NAMESPACE,
           kubeconfig: KubeconfigOpt = None, output: OutputOption = Output.table) -> None:
    """Every incident of one node, with its steps, and the node's cordon memory."""
    import asyncio

    from runtime.warden import view

    rows = asyncio.run(view.node_report(view.Where(address, namespace, kubeconfig), node))
    emit(rows, output, ["started", "trigger", "reason", "phase", "recent_cordons",
                        "escalated", "steps"])
