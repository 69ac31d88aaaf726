"""`gkr ui`: gkr-ui, the local web page over the telemetry store (runtime.telemetry.ui)."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli._app import CANCELLED, app, err_console, out_console
from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Env
from runtime.telemetry.ui import DEFAULT_PORT


@app.command()
def ui(
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port to serve on (0: any free port).")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(
        help="Address to listen on; the default serves this machine only.")] = "127.0.0.1",
    dsn: Annotated[str | None, typer.Option(
        help="Telemetry store: chdb:///folder or http(s)://user@host:8123/db (default: "
             f"${Env.TELEMETRY_DSN}, else .gkr/telemetry here).")] = None,
    kubeconfig: Annotated[str | None, typer.Option(
        help="Kubeconfig for live pods and nodes (default: $KUBECONFIG, else ~/.kube/config)."
    )] = None,
    context: Annotated[str | None, typer.Option(
        help="Kubeconfig context (default: the current one).")] = None,
    temporal_address: Annotated[str, typer.Option(
        help="Warden's Temporal frontend host:port.", envvar=Env.TEMPORAL_ADDRESS,
    )] = "localhost:7233",
    temporal_namespace: Annotated[str, typer.Option(
        help="Warden's Temporal namespace.", envvar=Env.TEMPORAL_NAMESPACE,
    )] = WARDEN_TEMPORAL_NAMESPACE,
) -> None:
    """Serve gkr-ui: runs, their curves, stragglers, pods and nodes, and Warden's nodes."""
    from runtime.telemetry.store import default_dsn, describe
    from runtime.telemetry.ui.live import Reach
    from runtime.telemetry.ui.server import UiConfig, serve

    config = UiConfig(dsn or default_dsn(), host, port,
                      Reach(kubeconfig, context, temporal_address, temporal_namespace))

    def ready(url: str) -> None:
        out_console.print(f"gkr ui: {url} (store {describe(config.dsn)}; Ctrl-C stops)")
        out_console.stream.flush()  # a supervising process reads the URL before we exit

    try:
        serve(config, ready)
    except KeyboardInterrupt:
        err_console.print("gkr ui: stopped")
        raise typer.Exit(CANCELLED) from None
