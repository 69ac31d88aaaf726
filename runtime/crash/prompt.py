"""The prompt a diagnosing agent gets: the failure, its workspace, its skills, its answer.

Written by gkr from the bundle's manifest, so every path and command in it is real: the
skills are the documented `gkr` commands with this run's values filled in.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from runtime.crash.files import MANIFEST
from runtime.crash.layout import Layout
from runtime.crash.report import PATCH, REPORT, RESERVED, SCHEMA
from runtime.identity import Env

# What the files of a bundle hold, by path prefix; the prompt lists those present.
CONTENTS = (
    ("bundle.json", "the manifest: failure summary, how the run was started, code identity, "
                    "last checkpoint, every file and what was left out"),
    ("failure.json", "the error as Ray Train reported it, per rank (`how`: failed or died)"),
    ("ranks/", "each failed rank's own report: identity, exception, whole traceback, its "
               "last log records"),
    ("logs/", "the last lines of every rank's and service's stdout (.out) and stderr (.err)"),
    ("config/", "the resolved config, how the run was launched (launch.json: config file and "
                "overrides), the config file as written"),
    ("job/", "the job spec and its rendered manifest"),
    ("code/", "the code identity (commit, changes.patch: the uncommitted changes, already "
              "applied in code/)"),
    ("flight_recorder/", "each rank's PyTorch Flight Recorder buffer (torch's pickle format)"),
    ("events.json", "the events of the run, of its pods and of their nodes"),
    ("telemetry/", "the queries that fetch this run's metrics (run them, see the skills)"),
)
REPRO_STEPS = 20  # at most, in the short local reproduction


def write_prompt(layout: Layout, code_note: str, cluster: bool = False) -> str:
    """Write prompt.md from the bundle in the workspace; the run's id."""
    manifest = json.loads((layout.bundle / MANIFEST).read_text())
    layout.prompt.write_text(prompt(manifest, layout, code_note, cluster))
    return str(manifest["run"])


def prompt(manifest: dict[str, Any], layout: Layout, code_note: str, cluster: bool) -> str:
    """The whole prompt."""
    run = manifest["run"]
    sections = [
        f"# Diagnose the failed training run `{run}`\n\n"
        f"Find why the run `{run}` (run name `{manifest.get('run_name', '')}`) failed and "
        "propose a fix. A person reviews your answer; nothing you propose is applied until "
        "they approve it. You have no credentials to push to git or to submit or change jobs; "
        "do not look for any.",
        _failure(manifest), _workspace(manifest, layout, code_note), _skills(manifest, layout),
        _answer(run, cluster),
    ]
    return "\n\n".join(sections) + "\n"


def _failure(manifest: dict[str, Any]) -> str:
    failure = manifest.get("failure") or {}
    lines = [f"## What failed\n\n{failure.get('summary', '(no summary: read failure.json)')}\n"]
    for rank in failure.get("ranks", []):
        report = f"; its report: `bundle/{rank['report']}`" if rank.get("report") else \
            "; it wrote no report" + (" (its process died)" if rank.get("how") == "died" else "")
        lines.append(f"- rank {rank['rank']}: {rank['how']} ({rank['type']}){report}")
    checkpoint = manifest.get("checkpoint")
    if checkpoint and checkpoint.get("latest_step") is not None:
        lines.append(f"\nThe last committed checkpoint is step {checkpoint['latest_step']} "
                     f"({checkpoint['latest_uri']}); an approved fix relaunches from there.")
    return "\n".join(lines)


def _workspace(manifest: dict[str, Any], layout: Layout, code_note: str) -> str:
    present = sorted(p.relative_to(layout.bundle).as_posix()
                     for p in layout.bundle.rglob("*") if p.is_file())
    listed = [f"  - `bundle/{prefix}`: {what}" for prefix, what in CONTENTS
              if any(name == prefix or name.startswith(prefix) for name in present)]
    left_out = manifest.get("left_out") or {}
    note = f"\n  Left out of the bundle for size: {', '.join(sorted(left_out))}." \
        if left_out else ""
    return (f"## Your workspace: `{layout.root}` (the current directory)\n\n"
            "- `bundle/`: the crash bundle; read it, do not change it.\n" + "\n".join(listed)
            + note + f"\n- `code/`: the run's code: {code_note}.\n"
            "- `out/`: where your answer goes.\n"
            f"- `{SCHEMA}`: the JSON Schema of your answer.")


def _skills(manifest: dict[str, Any], layout: Layout) -> str:
    run = manifest["run"]
    scratch = f"chdb://{layout.root / 'tmp' / 'scratch-telemetry'}"
    queries = "\n".join(f"   - {q['what']}: `{_in_bundle(q['command'])}`"
                        for q in manifest.get("queries", []))
    skills = [
        f"1. Read the run's telemetry (read-only; the store is in ${Env.TELEMETRY_DSN}):\n"
        + queries + "\n   - any query: `gkr telemetry sql \"SELECT ...\" -p run=" + run + "`",
        f"2. Ranks that arrive late at collectives: `gkr stragglers {run} --window 10s`.",
        "3. Flight Recorder analysis (torch's analyzer; its findings on stderr, the rows in a "
        "scratch store of yours): `gkr telemetry ingest flight-recorder bundle/flight_recorder "
        f"--run {run}-fr --dsn {scratch}`.",
    ]
    job = (manifest.get("identity") or {}).get("job")
    if job:
        skills.append(f"4. Logs of the job's pods: `gkr logs {job} --rank N` (read-only "
                      "access to the namespace's pods and logs).")
    repro = _reproduction(manifest, layout)
    if repro:
        skills.append(f"{len(skills) + 1}. A short local reproduction of the run with the "
                      f"code in `code/` (scaled down; raise run.steps to reach the failing "
                      f"step): `cd code && PYTHONPATH=$PWD${{PYTHONPATH:+:$PYTHONPATH}} {repro}`.")
    return "## Skills: commands you may run\n\n" + "\n".join(skills)


def _in_bundle(command: str) -> str:
    return command.replace("$(cat telemetry/", "$(cat bundle/telemetry/")


def _reproduction(manifest: dict[str, Any], layout: Layout) -> str:
    """`gkr run --local` with the run's config and overrides, scaled down: few steps, no
    checkpoints, its telemetry and bundle in the workspace."""
    launch = (manifest.get("config") or {}).get("launch")
    if not launch:
        return ""
    config = Path(launch["config"])
    root = (manifest.get("code") or {}).get("root") or ""
    if root and config.is_relative_to(root):
        config = config.relative_to(root)
    steps = min(int((manifest.get("failure") or {}).get("steps") or REPRO_STEPS), REPRO_STEPS)
    name = f"{manifest.get('run_name', 'repro')}"[:32] + "-repro"
    extra = [f"run.name={name}", f"run.steps={steps}", "checkpoint=null",
             f"telemetry.dsn=chdb://{layout.root / 'tmp' / 'repro-telemetry'}",
             f"crash.uri={layout.root / 'tmp' / 'repro-bundles'}",
             "logging.forward_worker_logs=true"]
    return shlex.join(["gkr", "run", "--local", str(config), *launch.get("overrides", []),
                       *extra])


def _answer(run: str, cluster: bool) -> str:
    fix = (f"Write the fix as a git diff in `out/{PATCH}` (paths relative to `code/`) and set "
           f'"patch": "{PATCH}".') if cluster else (
        f"Make the fix by editing files in `code/` (gkr takes their diff; do not commit), or "
        f'write it as a git diff in `out/{PATCH}` and set "patch": "{PATCH}".')
    reserved = ", ".join(RESERVED)
    return (f"## Your answer\n\nWrite `out/{REPORT}` following `{SCHEMA}`, with "
            f'"run": "{run}": the root cause and its category; the evidence, each item with its '
            "source (a path under `bundle/` or `code/`, `query:<name>` for a query you list "
            "under `queries`, or a command you ran) and the lines that show it; the queries you "
            "ran and what they found; the config overrides a relaunch should add (Hydra "
            f"syntax; not {reserved}: the relaunch sets those); a job spec change, in words; "
            "whether a local reproduction showed the failure; your confidence.\n\n"
            f"{fix} Keep the fix minimal. Exit with status 0 when the answer is written.")
