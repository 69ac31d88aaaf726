"""A diagnosis from start to decision: run the agent, keep its answer, approve or reject it.

The answer and the decision live beside the bundle, in its `diagnosis/` folder, wherever the
bundle is (a local run folder or gs://): `gkr diagnose show` reads them from there, whether a
local agent or the in-cluster Job wrote them. Every step is an event of the run (source
`diagnose`). An approval builds a branch through the same git path as `submit --gitops` (a
temporary worktree; the user's tree, index and current branch untouched), then relaunches a
local run from its last checkpoint, running the branch's code. An approval applies only the
proposal it was given the digest of (generator.diagnose.review), and agent-written text in the
commit message is escaped as on a terminal (runtime.crash.display).
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from generator.cluster.gitops import Patch, checkout, commit_patches
from generator.diagnose.review import (
    CHANGES,
    DECISION,
    Answer,
    Proposal,
    check_reviewed,
    load_answer,
    load_proposal,
    verified_changes,
)
from generator.diagnose.settings import AgentSettings
from generator.diagnose.workspace import (
    changes_since,
    check_patch,
    clone_code,
    repository_with,
)
from generator.errors import BadRequest
from generator.vcs import git_email
from runtime.crash.agent import DIAGNOSIS, agent_env, read_answer, run_agent, save_answer
from runtime.crash.code import CodeIdentity
from runtime.crash.display import visible
from runtime.crash.files import BundleError, read_plain
from runtime.crash.index import Bundle, record
from runtime.crash.launch import Launch
from runtime.crash.layout import Layout
from runtime.crash.prompt import write_prompt
from runtime.crash.report import DiagnosisReport

Printer = Callable[[str], None]
__all__ = ["Answer", "Approved", "Proposal", "approve", "diagnose", "load_answer",
           "load_proposal", "reject"]


@dataclass(frozen=True)
class Base:
    """What the agent's checkout started from: the repository holding the run's commit, the
    commit, and the run's checked uncommitted changes."""

    repo: Path
    commit: str
    changes: bytes


# --- running the agent -----------------------------------------------------------------------

def diagnose(bundle: Bundle, agent: AgentSettings, repos: list[Path], dsn: str | None,
             echo: Printer, keep: bool = False) -> Answer:
    """Prepare the workspace, run the agent, check and keep its answer."""
    record(dsn, bundle.run, "DiagnosisStarted", f"agent: {agent.command[0]}")
    folder = Path(tempfile.mkdtemp(prefix=f"gkr-diagnose-{bundle.run[:40]}-"))
    try:
        layout = Layout(folder).make()
        base = _prepare(bundle, layout, repos)
        echo(f"workspace: {folder}; running the agent: {' '.join(agent.command)}")
        env = agent_env(layout, agent.env, dsn, tools=str(Path(sys.executable).parent))
        done = run_agent(agent.command, layout, env, agent.timeout_s)
        report, patch = read_answer(layout, done, bundle.run)
        # The checkout is the agent's now: read as a work tree of a fresh repository only.
        patch = patch or changes_since(base.repo, base.commit, base.changes, layout.code)
        if patch:
            check_patch(base.repo, base.commit, base.changes, patch)
        save_answer(bundle.folder, layout, report, patch)
    except Exception as error:
        record(dsn, bundle.run, "DiagnosisFailed", str(error), "Warning")
        echo(f"the workspace is kept for a look: {folder}")
        raise
    if not keep:
        _remove(folder)
    record(dsn, bundle.run, "DiagnosisProposed", report.root_cause)
    return Answer(report, patch, None)


def _prepare(bundle: Bundle, layout: Layout, repos: list[Path]) -> Base:
    """The bundle and the run's code in the workspace, and the prompt; what the code's
    checkout starts from (the run's changes checked against its manifest)."""
    bundle.folder.download(layout.bundle, skip=f"{DIAGNOSIS}/")
    code = CodeIdentity.from_dict(bundle.manifest.get("code") or {})
    repo = repository_with(code, repos)
    local = layout.bundle / CHANGES
    changes = verified_changes(bundle, read_plain(local) if local.exists() else None,
                               str(local))
    clone_code(repo, code, changes, layout.code)
    note = f"a checkout of commit {code.commit[:12]}" + (
        " with the run's uncommitted changes applied" if changes else "")
    write_prompt(layout, note)
    return Base(repo, code.commit, changes)


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


# --- the decision ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Approved:
    """What an approval did."""

    branch: str | None  # None: nothing to commit (the fix is overrides only)
    commit: str
    relaunch_exit: int | None  # None: not relaunched


def approve(bundle: Bundle, repos: list[Path], branch: str | None, relaunch: bool,
            dsn: str | None, echo: Printer, reviewed: str) -> Approved:
    """Commit the fix on a new branch, record the decision, relaunch (local runs): the
    proposal whose digest is `reviewed`, read once and applied as read, or nothing
    (ProposalChanged)."""
    proposal = load_proposal(bundle)
    check_reviewed(proposal, reviewed, bundle.run)
    answer = _undecided(bundle, proposal.answer)
    code = CodeIdentity.from_dict(bundle.manifest.get("code") or {})
    repo = repository_with(code, repos)
    patches = _patches(bundle, proposal)
    name = branch or f"gkr/diagnose-{bundle.run}"
    made = commit_patches(repo, code.commit, name, patches) if patches else None
    commit = made.commit if made else code.commit
    decision = _decide(bundle, "approved", repo, branch=made.branch if made else None,
                       commit=commit, overrides=answer.report.overrides,
                       digest=proposal.digest)
    record(dsn, bundle.run, "Approved", f"branch {decision['branch']} at {commit[:12]}")
    if made:
        echo(f"branch {made.branch} at {commit[:12]}: {', '.join(made.paths) or 'no files'}")
    if not relaunch or not _local(bundle):
        return Approved(decision["branch"], commit, None)
    status = relaunch_local(bundle, answer.report, repo, commit, dsn, echo)
    _write_decision(bundle, decision | {"relaunch_exit": status})
    record(dsn, bundle.run, "Relaunched" if status == 0 else "RelaunchFailed",
           f"exit {status}", "Normal" if status == 0 else "Warning")
    return Approved(decision["branch"], commit, status)


def reject(bundle: Bundle, repos: list[Path], reason: str, dsn: str | None) -> dict[str, Any]:
    """Record that the proposal is rejected; nothing else changes."""
    _undecided(bundle, load_answer(bundle))
    repo = next((r for r in repos if r.is_dir()), Path.cwd())
    decision = _decide(bundle, "rejected", repo, reason=reason)
    record(dsn, bundle.run, "Rejected", reason or "rejected")
    return decision


def _undecided(bundle: Bundle, answer: Answer) -> Answer:
    if answer.decision is not None:
        raise BadRequest(f"the diagnosis of run {bundle.run} was {answer.state} already; run "
                         f"`gkr diagnose {bundle.run}` for a new one")
    return answer


def _patches(bundle: Bundle, proposal: Proposal) -> list[Patch]:
    """The run's own uncommitted changes (so the branch holds the code that ran), then the
    fix: the bytes checked against the digest."""
    run, changes, answer = bundle.run, proposal.changes, proposal.answer
    found = [Patch(changes, f"The code of run {run} as it ran (its uncommitted changes, from "
                            "its crash bundle)")] if changes else []
    if answer.patch:
        # `git log` prints the message on a terminal: escaped like everything the agent wrote.
        cause = visible((answer.report.root_cause.strip().splitlines() or [""])[0])[:200]
        found.append(Patch(answer.patch, f"Fix the failure of run {run}\n\n{cause}\n\n"
                                         "Proposed by `gkr diagnose`, approved by a person."))
    return found


def _decide(bundle: Bundle, decision: str, repo: Path, **details: Any) -> dict[str, Any]:
    body = {"decision": decision, "by": git_email(repo) or getpass.getuser(),
            "at": datetime.now(UTC).isoformat(), **details}
    _write_decision(bundle, body)
    return body


def _write_decision(bundle: Bundle, body: dict[str, Any]) -> None:
    try:
        bundle.folder.child(DIAGNOSIS).write(DECISION, json.dumps(body, indent=2).encode())
    except OSError as error:
        raise BundleError(f"cannot record the decision in {bundle.uri}: {error}") from None


def _local(bundle: Bundle) -> bool:
    return (bundle.manifest.get("identity") or {}).get("cluster") in ("local", "")


# --- the relaunch ----------------------------------------------------------------------------

def relaunch_argv(bundle: Bundle, report: DiagnosisReport, tree: Path,
                  dsn: str | None) -> list[str]:
    """`gkr run --local` of the run's config in `tree` (the approved code), with its overrides,
    the agent's, and what continues the failed run: its name, its checkpoints (the latest
    committed one), its bundle folder and its telemetry store."""
    config = bundle.manifest.get("config") or {}
    if not config.get("launch"):
        raise BadRequest(f"run {bundle.run}'s bundle does not say how it was started; "
                         "relaunch it by hand from the approved branch")
    launch = Launch.from_dict(config["launch"])
    # `++`: set whether or not the run's YAML has the key (Hydra's add-or-override).
    extra = [f"++run.name={bundle.manifest['run_name']}",
             f"++crash.uri={bundle.uri.rsplit('/', 1)[0]}"]
    checkpoint = bundle.manifest.get("checkpoint")
    if checkpoint:
        extra += [f"++checkpoint.uri={checkpoint['uri']}", "++checkpoint.resume_from=latest"]
    if dsn and dsn.startswith("chdb://"):
        extra.append(f"++telemetry.dsn={dsn}")
    return [sys.executable, "-c", "from generator.cli import main; main()", "run", "--local",
            str(_in_tree(launch, bundle, tree)), *launch.overrides, *report.overrides, *extra]


def _in_tree(launch: Launch, bundle: Bundle, tree: Path) -> Path:
    """The config file in the approved checkout (one outside the repository stays put)."""
    root = str((bundle.manifest.get("code") or {}).get("root") or "")
    config = Path(launch.config)
    return tree / config.relative_to(root) if root and config.is_relative_to(root) else config


def relaunch_local(bundle: Bundle, report: DiagnosisReport, repo: Path, commit: str,
                   dsn: str | None, echo: Printer) -> int:
    """Run the approved code from a temporary checkout of `commit`; its exit status. Its
    output goes to the terminal as a `gkr run --local` does."""
    with checkout(repo, commit) as tree:
        argv = relaunch_argv(bundle, report, tree, dsn)
        echo(f"relaunching run {bundle.manifest['run_name']} from its last checkpoint, with "
             f"the approved code ({commit[:12]}): gkr {visible(' '.join(argv[3:]))}")
        path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
        sys.stdout.flush()
        done = subprocess.run(argv, cwd=tree, env={**os.environ, "PYTHONPATH": path},
                              check=False)
    return done.returncode
