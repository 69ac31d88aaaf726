"""`gkr warden status` and `gkr warden history NODE`: Warden's view of the fleet."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict

from generator.cli._app import app
from generator.cli._output import Output, OutputOption, emit
from generator.errors import ToolFailed
from runtime.identity import Env

warden_app = typer.Typer(help="Warden, the GPU fleet health manager: node states and incidents.",
                         no_args_is_help=True)
app.add_typer(warden_app, name="warden")

class WardenQuery(BaseModel):
    """Where to read Warden's state, and how to print it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str
    namespace: str
    kubeconfig: str | None
    output: Output


AddressOpt = Annotated[str, typer.Option(help="Temporal frontend host:port.",
                                         envvar=Env.TEMPORAL_ADDRESS)]
NamespaceOpt = Annotated[str, typer.Option(help="Temporal namespace of Warden.",
                                           envvar=Env.TEMPORAL_NAMESPACE)]
KubeconfigOpt = Annotated[str | None, typer.Option(
    help="Kubeconfig to read node annotations from (omit to skip them).")]


@warden_app.command()
def status(address: AddressOpt = "localhost:7233", namespace: NamespaceOpt = "default",
           kubeconfig: KubeconfigOpt = None, output: OutputOption = Output.table) -> None:
    """The latest incident phase of every node Warden has handled, and reserved nodes."""
    query = WardenQuery(address=address, namespace=namespace, kubeconfig=kubeconfig,
                        output=output)
    rows = _run(_status(query))
    emit(rows, query.output, ["node", "phase", "status", "started", "recent_cordons",
                                "reserved_for", "reserved_until"])


@warden_app.command()
def history(node: Annotated[str, typer.Argument(help="Node name.")],
            address: AddressOpt = "localhost:7233", namespace: NamespaceOpt = "default",
            kubeconfig: KubeconfigOpt = None, output: OutputOption = Output.table) -> None:
    """Every incident of one node, with its steps, and the node's cordon memory."""
    query = WardenQuery(address=address, namespace=namespace, kubeconfig=kubeconfig,
                        output=output)
    rows = _run(_history(query, node))
    emit(rows, query.output, ["started", "trigger", "reason", "phase", "recent_cordons",
                                "escalated", "steps"])


async def _client(query: WardenQuery) -> Any:
    from temporalio.client import Client  # lazily: only these commands need Temporal

    try:
        return await Client.connect(query.address, namespace=query.namespace)
    except RuntimeError as error:
        raise ToolFailed(f"cannot reach Temporal at {query.address}: {error}") from error


async def _status(query: WardenQuery) -> list[dict[str, Any]]:
    from runtime.warden.view import fleet_status, node_memory, reserved_nodes

    rows = await fleet_status(await _client(query))
    cluster = _cluster(query)
    if cluster is not None:
        rows = [{**row, **node_memory(cluster, row["node"]), "phase": row["phase"]}
                for row in rows]
        handled = {row["node"] for row in rows}
        rows += [r for r in reserved_nodes(cluster) if r["node"] not in handled]
    return sorted(rows, key=lambda row: row["node"])


async def _history(query: WardenQuery, node: str) -> list[dict[str, Any]]:
    from runtime.warden.view import node_history, node_memory

    rows = await node_history(await _client(query), node)
    cluster = _cluster(query)
    if cluster is not None:
        rows.append({"started": "now", "trigger": "(node annotations)",
                     **node_memory(cluster, node)})
    return rows


def _cluster(query: WardenQuery) -> Any:
    """Warden's cluster seam, when a kubeconfig is given (its failures reach `main` as they
    are: runtime errors carry their own category)."""
    if query.kubeconfig is None:
        return None
    from runtime.warden.cluster import KubeCluster
    from runtime.warden.config import KubernetesSettings

    return KubeCluster.connect(KubernetesSettings(kubeconfig=query.kubeconfig))


def _run(coro: Coroutine[Any, Any, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return asyncio.run(coro)
