"""`gkr runs`, `gkr bundle` and `gkr diagnose`: from a crashed run to an approved relaunch
(seed §7.4).

A failed run leaves a crash bundle (runtime.crash). `gkr diagnose RUN` runs the configured
agent on it in an isolated workspace; `gkr diagnose show RUN` prints the agent's report and
patch; `approve` commits the patch on a new branch and relaunches the run from its last
checkpoint, `reject` records the decision. The library is generator.diagnose; every command
imports it in its body, so `gkr --help` stays fast.

Everything the agent wrote reaches the terminal through runtime.crash.display.visible (one
function: control and invisible characters shown as escapes). `show` prints the proposal's
digest; `approve --digest` applies that proposal or nothing, and a plain `approve` prints the
whole proposal and binds to what it printed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from generator.cli._app import app, cancelled, confirm, err_console, out_console
from generator.cli._output import Output, OutputOption, emit, print_diff

if TYPE_CHECKING:
    from runtime.crash.index import Bundle

RunArgument = Annotated[str, typer.Argument(
    help="The run: its id (`gkr runs` lists them), or its name for its newest bundle.")]
BundleOption = Annotated[str | None, typer.Option(
    "--bundle", help="The bundle's folder (a path or gs://...), when gkr cannot find it.")]
DsnOption = Annotated[str | None, typer.Option(
    "--dsn", help="Telemetry store (default: $GKR_TELEMETRY_DSN, else .gkr/telemetry here).")]
RUN_COLUMNS = {"run": "RUN", "state": "STATE", "started": "STARTED", "ended": "ENDED",
               "diagnosis": "DIAGNOSIS", "bundle": "BUNDLE"}


def _store_dsn(flag: str | None) -> str | None:
    """The store to read: the flag, the environment's, or this folder's (if it has one)."""
    from runtime.identity import Env

    if flag or os.environ.get(Env.TELEMETRY_DSN):
        return flag or os.environ[Env.TELEMETRY_DSN]
    folder = Path.cwd() / ".gkr" / "telemetry"
    return f"chdb://{folder.resolve()}" if folder.is_dir() else None


def _run_dsn(bundle: Bundle, flag: str | None) -> str | None:
    """The run's store: the flag, the environment's, else the one the run wrote to (an
    embedded store on this machine)."""
    telemetry = bundle.manifest.get("telemetry") or {}
    fallback = telemetry.get("dsn") if telemetry.get("embedded") else None
    return _store_dsn(flag) or fallback


def _find(run: str, uri: str | None, dsn: str | None) -> Bundle:
    from runtime.crash.index import find_bundle, open_bundle

    return open_bundle(uri) if uri else find_bundle(run, Path.cwd(), _store_dsn(dsn))


# --- gkr runs, gkr bundle --------------------------------------------------------------------

@app.command()
def runs(
    output: OutputOption = Output.table,
    dsn: DsnOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most runs shown.")] = 50,
) -> None:
    """List runs, newest first: their state (Started, Succeeded, Failed), crash bundle and
    diagnosis, from the telemetry store and the local run folders."""
    from runtime.crash.index import list_runs, local_bundles
    from runtime.telemetry.store import StoreError

    rows: dict[str, dict[str, Any]] = {}
    store = _store_dsn(dsn)
    if store:
        try:
            rows = {row["run"]: row for row in list_runs(store, limit)}
        except StoreError as error:
            err_console.print(f"warning: telemetry: {error}; listing local bundles only")
    for bundle in local_bundles(Path.cwd()):
        row = rows.setdefault(bundle.run, {"run": bundle.run, "state": "Failed",
                                           "started": _time(bundle.manifest.get("started")),
                                           "ended": _time(bundle.manifest.get("created")),
                                           "diagnosis": ""})
        row["bundle"] = row.get("bundle") or bundle.uri
    ordered = sorted(rows.values(), key=lambda r: str(r.get("started") or ""), reverse=True)
    emit([_run_row(row) for row in ordered[:limit]], output, RUN_COLUMNS)


def _run_row(row: dict[str, Any]) -> dict[str, Any]:
    from datetime import datetime

    ended = row.get("ended")
    unset = isinstance(ended, datetime) and ended.year < 2000  # maxIf over no rows: the epoch
    return {**row, "ended": None if unset else ended, "bundle": row.get("bundle") or "",
            "diagnosis": str(row.get("diagnosis") or "")}


def _time(text: Any) -> Any:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(text))
    except ValueError:
        return text


@app.command()
def bundle(
    run: RunArgument,
    download: Annotated[Path | None, typer.Option(
        "--download", help="Copy the bundle's files into this folder.")] = None,
    uri: BundleOption = None,
    output: OutputOption = Output.table,
    dsn: DsnOption = None,
) -> None:
    """Show a failed run's crash bundle (what failed, where each part is), or download it."""
    found = _find(run, uri, dsn)
    if download is not None:
        names = found.folder.download(download)
        out_console.print(f"{len(names)} files of {found.uri} copied to {download}")
        return
    if output is not Output.table:
        emit([found.manifest | {"files": found.folder.names()}], output)
        return
    _print_bundle(found)


def _print_bundle(found: Bundle) -> None:
    manifest = found.manifest
    failure = manifest.get("failure") or {}
    code = manifest.get("code") or {}
    checkpoint = manifest.get("checkpoint") or {}
    lines = [("run", f"{found.run} (run name {manifest.get('run_name')})"),
             ("bundle", found.uri), ("created", str(manifest.get("created"))),
             ("failure", str(failure.get("summary", ""))),
             ("code", f"{code.get('commit', '')[:12] or 'no git commit'}"
                      + (" with uncommitted changes" if code.get("dirty") else "")),
             ("checkpoint", f"step {checkpoint.get('latest_step')} in {checkpoint.get('uri')}"
              if checkpoint else "none")]
    for rank in failure.get("ranks", []):
        lines.append((f"rank {rank['rank']}", f"{rank['how']}: {rank['type']}"
                      + (f" (report {rank['report']})" if rank.get("report") else "")))
    for key, value in lines:
        out_console.print(f"{key + ':':<12} {value}")
    out_console.print("")
    left_out = manifest.get("left_out") or {}
    emit([{"file": name, "bytes": size} for name, size in sorted(found.folder.sizes().items())]
         + [{"file": name, "bytes": f"left out: {why}"} for name, why in left_out.items()],
         Output.table, {"file": "FILE", "bytes": "BYTES"})
    for problem in manifest.get("problems") or []:
        err_console.print(f"warning: bundle: {problem}")


# --- gkr diagnose ----------------------------------------------------------------------------

class _RunOrAction(TyperGroup):
    """`gkr diagnose RUN` starts a diagnosis; `gkr diagnose show|approve|reject RUN` acts
    on one (a run id is never one of these words)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["start", *args]
        return super().parse_args(ctx, args)


diagnose_app = typer.Typer(
    cls=_RunOrAction, no_args_is_help=True,
    help="Let an agent diagnose a failed run (`gkr diagnose RUN`), then show, approve or "
         "reject its proposal.")
app.add_typer(diagnose_app, name="diagnose")


@diagnose_app.command("start")
def start(
    run: RunArgument,
    agent: Annotated[str | None, typer.Option(
        "--agent", help="The agent's command line (default: $GKR_AGENT_COMMAND, else "
                        "agent.command in platform/catalog/gke.yaml).")] = None,
    uri: BundleOption = None,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the workspace (its path is printed).")] = False,
    cluster: Annotated[str | None, typer.Option(
        "--cluster", help="Run the agent as a Job on this cluster (the bundle must be on "
                          "gs://).")] = None,
    namespace: Annotated[str | None, typer.Option(
        "--namespace", "-n", help="The team namespace of the Job.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="With --cluster: print the Job and its RBAC only.")] = False,
    dsn: DsnOption = None,
) -> None:
    """Run the agent on RUN's crash bundle in an isolated workspace; its answer waits for
    `gkr diagnose approve` or `reject`."""
    from generator.diagnose.flow import diagnose
    from generator.diagnose.settings import agent_settings

    found = _find(run, uri, dsn)
    settings = agent_settings(agent, _repo_root())
    if cluster:
        _in_cluster(found, settings.command, cluster, namespace, dry_run)
        return
    answer = diagnose(found, settings, [Path.cwd()], _run_dsn(found, dsn), out_console.print,
                      keep)
    out_console.print(f"root cause: {_shown(answer.report.root_cause)}")
    out_console.print(f"proposed: {'a patch, ' if answer.patch else ''}"
                      f"{len(answer.report.overrides)} override(s); review it with `gkr "
                      f"diagnose show {found.run}`, then `gkr diagnose approve {found.run}` "
                      f"or `reject`")


def _repo_root() -> Path | None:
    from generator.errors import BadRequest
    from generator.repo import find_root

    try:
        return find_root()
    except BadRequest:
        return None


def _in_cluster(found: Bundle, command: tuple[str, ...], cluster: str, namespace: str | None,
                dry_run: bool) -> None:
    import yaml

    from generator.cluster.target import Asked, find_target
    from generator.diagnose.job import diagnosis_objects
    from generator.errors import BadRequest
    from generator.repo import find_root

    if "://" not in found.uri:
        raise BadRequest(f"the bundle {found.uri} is on this machine; a Job in the cluster "
                         "reads bundles from gs:// (set crash.uri for the run)")
    target = find_target(Asked(find_root(), None, cluster, namespace))
    objects = diagnosis_objects(target.catalog, target.cluster, target.namespace, found.run,
                                found.uri, list(command))
    if dry_run:
        print(yaml.safe_dump_all(objects, sort_keys=False), end="")
        return
    from runtime.kube import Kube

    api = Kube.connect(target.cluster.kube_context)
    for document in objects:
        api.apply(document)
    out_console.print(f"job {objects[-1]['metadata']['name']} started in {target.namespace}; "
                      f"its answer lands in {found.uri}/diagnosis: `gkr diagnose show "
                      f"{found.run} --bundle {found.uri}`")


@diagnose_app.command("show")
def show(run: RunArgument, uri: BundleOption = None, output: OutputOption = Output.table,
         dsn: DsnOption = None) -> None:
    """Print the agent's report and patch, and the decision on them."""
    from generator.diagnose.flow import load_proposal

    found = _find(run, uri, dsn)
    proposal = load_proposal(found)
    answer = proposal.answer
    if output is not Output.table:
        emit([{"run": found.run, "bundle": found.uri, "state": answer.state,
               "decision": answer.decision, "report": answer.report.model_dump(mode="json"),
               "patch": answer.patch.decode("utf-8", "replace"),
               "digest": proposal.digest}], output)
        return
    _print_report(found, proposal)
    if not answer.decision:
        out_console.print(f"approve exactly this: gkr diagnose approve {found.run} --digest "
                          f"{proposal.digest}")


def _shown(text: str) -> str:
    """Agent-written text as the terminal gets it (runtime.crash.display)."""
    from runtime.crash.display import visible

    return visible(text)


def _print_report(found: Bundle, proposal: Any) -> None:
    from runtime.crash.display import hidden_count, visible_bytes

    answer = proposal.answer
    report = answer.report
    state = answer.state + ("" if answer.decision else
                            f" (approve or reject: `gkr diagnose approve|reject {found.run}`)")
    for key, value in (("run", found.run), ("state", state),
                       ("root cause", _shown(report.root_cause)),
                       ("category", f"{report.category} (confidence {report.confidence}, "
                                    f"reproduced: {'yes' if report.reproduced else 'no'})")):
        out_console.print(f"{key + ':':<12} {value}")
    out_console.print("evidence:")
    for item in report.evidence:
        out_console.print(f"  - {_shown(item.claim)} [{_shown(item.source)}]")
        for line in _shown(item.excerpt).splitlines()[:10]:
            out_console.print(f"      {line}")
    for query in report.queries:
        out_console.print(f"query {_shown(query.name)}: {_shown(query.finding)}\n  "
                          f"{_shown(' '.join(query.sql.split()))}")
    if report.overrides:
        out_console.print(f"overrides:   {_shown(' '.join(report.overrides))}")
    if report.spec_change:
        out_console.print(f"spec change: {_shown(report.spec_change)}")
    if answer.patch:
        out_console.print("patch:")
        print_diff(visible_bytes(answer.patch))
        hidden = hidden_count(answer.patch.decode("utf-8", "replace"))
        if hidden:
            out_console.print(f"note: the patch holds {hidden} control or invisible "
                              "character(s), shown escaped above (\\xNN, \\uNNNN)")
    out_console.print(f"{'digest:':<12} {proposal.digest}")


@diagnose_app.command("approve")
def approve(
    run: RunArgument,
    branch: Annotated[str | None, typer.Option(
        "--branch", help="The new branch (default: gkr/diagnose-RUN).")] = None,
    relaunch: Annotated[bool, typer.Option(
        "--relaunch/--no-relaunch", help="Relaunch a local run from its last checkpoint with "
                                         "the approved code.")] = True,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    digest: Annotated[str | None, typer.Option(
        "--digest", help="Apply only the proposal of this digest (as `gkr diagnose show` "
                         "printed it); anything else is refused.")] = None,
    uri: BundleOption = None,
    dsn: DsnOption = None,
) -> None:
    """Apply the proposal: commit its patch on a new branch (your tree is not touched), then
    relaunch the run from its last checkpoint. Without --digest the whole proposal is printed
    first, and the approval binds to what was printed."""
    from generator.diagnose import flow

    found = _find(run, uri, dsn)
    proposal = flow.load_proposal(found)
    if digest is None:
        _print_report(found, proposal)
    reviewed = digest or proposal.digest
    if not yes and not confirm(f"apply the proposal {reviewed} for run {found.run} "
                               f"({proposal.answer.state})?"):
        raise cancelled(f"approval of run {found.run}'s proposal")
    done = flow.approve(found, [Path.cwd()], branch, relaunch, _run_dsn(found, dsn),
                        out_console.print, reviewed)
    if done.relaunch_exit is None:
        out_console.print(f"approved: {done.branch or done.commit[:12]}" + (
            "" if not relaunch else "; a cluster run resumes from its last checkpoint once "
            "the branch is merged and synced"))
    elif done.relaunch_exit != 0:
        from generator.errors import ToolFailed

        raise ToolFailed(f"the relaunch of run {found.run} failed (exit {done.relaunch_exit}); "
                         "its output is above")
    else:
        out_console.print(f"approved and relaunched: run {found.manifest['run_name']} finished "
                          f"on {done.branch or done.commit[:12]}")


@diagnose_app.command("reject")
def reject(
    run: RunArgument,
    reason: Annotated[str, typer.Option("--reason", help="Why, for the record.")] = "",
    uri: BundleOption = None,
    dsn: DsnOption = None,
) -> None:
    """Reject the proposal: recorded, and nothing else changes."""
    from generator.diagnose import flow

    found = _find(run, uri, dsn)
    decision = flow.reject(found, [Path.cwd()], reason, _run_dsn(found, dsn))
    out_console.print(f"rejected by {decision['by']}: nothing was applied")
