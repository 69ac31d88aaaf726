"""`gkr telemetry …`: the telemetry store from the command line (seed §8).

`ingest` loads NCCL Inspector logs and Flight Recorder dumps for offline analysis; `sql` runs a
query on the store; `gkr stragglers` (top level) runs the straggler analysis. Each command
imports the store and parsers in its body, so `gkr --help` stays fast.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from generator.cli._app import app, err_console, out_console
from generator.cli._output import Output, OutputOption, emit
from runtime.telemetry.ingest import Kind

if TYPE_CHECKING:
    from runtime.telemetry.stragglers import RankSummary, Window

telemetry_app = typer.Typer(
    help="The telemetry store: load NCCL Inspector logs and Flight Recorder dumps.",
    no_args_is_help=True,
)
app.add_typer(telemetry_app, name="telemetry")

DsnOption = Annotated[str | None, typer.Option(
    "--dsn", help="Telemetry store: chdb:///abs/folder or http(s)://user@host:8123/database "
                  "(default: $GKR_TELEMETRY_DSN, else chdb:// .gkr/telemetry in the current "
                  "directory).")]


@telemetry_app.command()
def ingest(
    kind: Annotated[Kind, typer.Argument(
        help="inspector (NCCL Inspector <host>-pid<PID>.log files) or flight-recorder "
             "(Flight Recorder dumps <prefix><rank>, pickle or .json).")],
    paths: Annotated[list[Path], typer.Argument(
        help="Files, or folders standing for their files of the kind.", show_default=False)],
    run: Annotated[str, typer.Option("--run", help="The run the rows belong to.")],
    dsn: DsnOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Load files into the store, then say how many rows each gave and to which table;
    for Flight Recorder dumps, also what torch's analyzer finds (on stderr)."""
    from runtime.identity import Identity
    from runtime.telemetry import ingest as loader
    from runtime.telemetry.store import Store, default_dsn

    if not run.strip():
        raise typer.BadParameter("must name a run", param_hint="--run")
    with Store.connect(dsn or default_dsn()) as store:
        done = loader.ingest(store, kind, paths, Identity(run=run))
    emit([asdict(loaded) for loaded in done.files], output,
         {"file": "FILE", "table": "TABLE", "rows": "ROWS", "note": "NOTE"})
    for finding in done.findings:
        err_console.print(f"flight recorder: {finding}")


# --- `gkr telemetry sql` and `gkr stragglers`: reading the store ---------------------------

class SqlOutput(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


WINDOW_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_window(text: str) -> int:
    """`30s`, `1m`, `90` (seconds) or `1h` as whole seconds, at least one."""
    match = re.fullmatch(r"\s*(\d+)\s*([smh]?)\s*", text.lower())
    if not match or int(match.group(1)) < 1:
        raise typer.BadParameter(f"{text!r}: a duration such as 30s, 1m or 90 (seconds)",
                                 param_hint="--window")
    return int(match.group(1)) * WINDOW_UNITS[match.group(2)]


def _parameters(pairs: list[str]) -> dict[str, str]:
    found = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise typer.BadParameter(f"{pair!r}: use NAME=VALUE, for a {{NAME:Type}} in the "
                                     "query", param_hint="--param")
        found[name] = value
    return found


@telemetry_app.command("sql")
def sql_command(
    query: Annotated[str, typer.Argument(help="One ClickHouse statement, e.g. \"SELECT run, "
                                              "count() FROM collectives GROUP BY run\".")],
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="NAME=VALUE for a {NAME:Type} placeholder (repeatable); the "
                              "server binds it, so values need no quoting.")] = None,
    output: Annotated[SqlOutput, typer.Option("-o", "--output", help="table, json or csv."
                                              )] = SqlOutput.table,
    dsn: DsnOption = None,
) -> None:
    """Run a query on the telemetry store and print its rows (the analyses' own SQL is in
    runtime/telemetry/sql/). Reads only: the engine runs it read-only, and statements that
    reach files or the network are refused (the diagnosis agent's skill is this command)."""
    from runtime.telemetry.store import Store, default_dsn

    parameters = _parameters(param or [])
    with Store.connect(dsn or default_dsn(), read_only=True) as store:
        rows = store.query(query, parameters)
    _print_rows(list(rows.columns), rows.rows, output)


def _print_rows(columns: list[str], rows: list[tuple[Any, ...]], output: SqlOutput) -> None:
    if output is SqlOutput.csv:
        import csv

        writer = csv.writer(out_console.stream, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_sql_value(value) for value in row] for row in rows])
    elif output is SqlOutput.json:
        import json

        data = [{name: _sql_value(value) for name, value in zip(
            columns, row, strict=True)} for row in rows]
        out_console.print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        keys = {f"c{i}": name for i, name in enumerate(columns)}
        emit([{f"c{i}": _sql_value(value) for i, value in enumerate(row)} for row in rows],
             Output.table, keys, empty="(0 rows)")


def _sql_value(value: Any) -> Any:
    """A cell as plain data: times in RFC 3339 with their fraction (UTC when the column has no
    zone), lists and maps as JSON has them, any other type (Decimal, UUID, IP) as text."""
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return moment.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [_sql_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _sql_value(v) for k, v in value.items()}
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


@app.command()
def stragglers(
    run: Annotated[str, typer.Argument(help="The run (its name in the telemetry store).")],
    window: Annotated[str, typer.Option(
        "--window", "-w", help="Window length: 30s, 1m, 90 (seconds).")] = "30s",
    top: Annotated[int, typer.Option("--top", min=1,
                                     help="Ranks in the persistent-straggler table.")] = 10,
    groups: Annotated[int, typer.Option(
        "--groups", min=0, help="Collective groups per window in the table, those of largest "
                                "skew first (0: every group).")] = 3,
    output: OutputOption = Output.table,
    dsn: DsnOption = None,
) -> None:
    """Find the ranks that arrive late at collectives (seed §8.3): per window and collective
    group the last arriver, the skew and the median rank's wait; then the ranks that arrive
    last most often, with their pod and node. The table shows each window's groups of largest
    skew; -o json gives every group and every rank's waiting."""
    from runtime.telemetry.store import Store, default_dsn
    from runtime.telemetry.stragglers import analyze

    window_s = parse_window(window)
    table = output is Output.table
    with Store.connect(dsn or default_dsn()) as store:  # the table shows no rank's waiting
        report = analyze(store, run, window_s, waiting=not table,
                         groups_per_window=groups if table and groups else None)
    if not table:
        emit([report.as_dict()], output)
        return
    emit([_window_row(w) for w in report.windows], Output.table, WINDOW_COLUMNS,
         title=f"{run}: last arrivers per {window_s}s window")
    out_console.print("")
    emit([_rank_row(r, report.window_count) for r in report.ranks[:top] if r.times_last],
         Output.table, RANK_COLUMNS, title="ranks that arrived last, most often first")
    out_console.print("")
    out_console.print(report.conclusion())


WINDOW_COLUMNS = {"window": "WINDOW", "group": "GROUP", "ranks": "RANKS", "last": "LAST",
                  "skew": "SKEW MS", "wait": "WAIT P50 MS", "transfer": "TRANSFER MS"}
RANK_COLUMNS = {"rank": "RANK", "pod": "POD", "node": "NODE", "windows": "LAST IN WINDOWS",
                "groups": "LAST IN GROUPS", "skew": "MEAN SKEW MS", "max": "MAX SKEW MS",
                "wait": "MEAN WAIT MS"}


def _window_row(window: Window) -> dict[str, str | int]:
    from generator.cli._output import rfc3339

    group = " ".join(part for part in (window.comm_name if window.comm_name != "unknown" else
                                       window.comm_id, window.coll,
                                       _size(window.msg_size_bytes), window.algo) if part)
    return {"window": rfc3339(window.window_start), "group": group, "ranks": window.ranks,
            "last": window.last_rank, "skew": _ms(window.skew_us),
            "wait": _ms(window.wait_p50_us), "transfer": _ms(window.transfer_us)}


def _rank_row(rank: RankSummary, windows: int) -> dict[str, str | int]:
    return {"rank": rank.rank, "pod": rank.pod, "node": rank.node,
            "windows": f"{rank.windows_last}/{windows}",
            "groups": f"{rank.times_last}/{rank.groups} ({rank.share_last:.0%})",
            "skew": _ms(rank.mean_skew_us), "max": _ms(rank.max_skew_us),
            "wait": _ms(rank.mean_waiting_us)}


def _ms(microseconds: float) -> str:
    return f"{microseconds / 1000:.1f}"


def _size(size: int) -> str:
    """Bytes as NCCL's tools print them: 64MiB, 512KiB, 8B."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B"


# --- `gkr ledger`: the sample ledger's verdict -------------------------------------------

NO_LEDGER = 2  # the exit code of a run without a ledger (0: exactly once, 1: not)


@app.command()
def ledger(
    runs: Annotated[list[str], typer.Argument(
        help="The run (its run id in the telemetry store); several are judged as one stream: "
             "the learners of a DiLoCo experiment.", show_default=False)],
    json_output: Annotated[bool, typer.Option("--json", help="The verdict as JSON.")] = False,
    folders: Annotated[list[Path] | None, typer.Option(
        "--folder", help="Ledger files to load first, <folder>/<run>/*.jsonl (default: where "
                         "a local run writes them); repeat it for learners' own folders.")
    ] = None,
    dsn: DsnOption = None,
) -> None:
    """Whether the run trained every sample of its schedule exactly once (up to the step it
    reached), from its sample ledger: else the missing and duplicated index ranges, with the
    steps, groups and ranks where they happened. Loads the runs' local ledger files first.
    Exit 0: exactly once; 1: not; 2: no ledger for the run."""
    import json

    from runtime.telemetry.ledger_store import NoLedger, load_ledger, run_verdict
    from runtime.telemetry.store import Store, default_dsn

    dsn = dsn or default_dsn()
    places = folders or [_ledger_folder(dsn)]
    with Store.connect(dsn) as store:
        for place in places:
            for run in runs:
                load_ledger(store, place, run)
        try:
            verdict = run_verdict(store, runs)
        except NoLedger as error:
            where = ", ".join(str(place / run) for place in places for run in runs)
            err_console.print(f"{error}, nor files under {where}; a run writes its "
                              "ledger as it trains (GKR_LEDGER_DIR in pods); point --folder "
                              "at its files, or --dsn at the store that holds them")
            raise typer.Exit(NO_LEDGER) from None
    out_console.print(json.dumps(verdict.as_dict(), indent=2) if json_output else
                      f"{'run' if len(runs) == 1 else 'runs'} {', '.join(runs)}: "
                      f"{verdict.explain()}")
    if not verdict.exactly_once:
        raise typer.Exit(1)


def _ledger_folder(dsn: str) -> Path:
    """Where a local run writes its ledger files (runtime.telemetry.ledger decides)."""
    from runtime.telemetry.ledger import ledger_folder

    return ledger_folder(dsn)
