"""Running a diagnosing agent on a bundle: its workspace, its environment, its answer.

The agent is any command-line program (a coding agent); gkr owns everything around it. Its
workspace is one folder:

    bundle/              the crash bundle (read it; do not change it)
    code/                the run's code: a checkout at its commit with its recorded changes
    out/                 where the answer goes: report.json, and patch.diff if any
    prompt.md            what to do, the skills, the expected answer
    report.schema.json   the JSON Schema of report.json
    home/, tmp/          the agent's HOME and TMPDIR

It runs in the workspace with an environment built from nothing: PATH and the locale, the
telemetry DSN it may read with, and only the variables the catalog names (its API key).
Credentials of git, the cloud and the cluster stay out, so the approval gate does not rest on
the agent's good behaviour: it cannot push or submit, and nothing it proposes is applied
until a person runs `gkr diagnose approve`.

`python -m runtime.crash BUNDLE_URI -- COMMAND...` (runtime/crash/__main__.py) runs the same
steps in the in-cluster Job.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.crash.files import Folder, read_plain
from runtime.crash.layout import PROMPT, Layout
from runtime.crash.report import PATCH, REPORT, DiagnosisReport, parse_report
from runtime.errors import Category, RuntimeFailure
from runtime.identity import Env
from runtime.procs import tied_argv

DIAGNOSIS = "diagnosis"  # the bundle's subfolder holding the answer and the decision
AGENT_LOG = "agent.log"
# What an agent's environment keeps of the caller's: finding programs and Python packages, the
# locale, a terminal.
BASE_ENV = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ")


class AgentFailed(RuntimeFailure):
    """The agent did not finish, or left no valid report."""

    category = Category.CHECK


@dataclass(frozen=True)
class AgentRun:
    """How the agent ended."""

    exit_code: int | None  # None: killed at the time limit
    log: Path

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def agent_env(layout: Layout, passed: Sequence[str], telemetry_dsn: str | None,
              environ: Mapping[str, str] | None = None, tools: str = "") -> dict[str, str]:
    """The agent's environment: built from nothing, see the module doc. `tools`: a folder
    put first on PATH (where this `gkr` is, so that the skills' commands are found)."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in BASE_ENV if name in source}
    if tools:
        env["PATH"] = os.pathsep.join(filter(None, [tools, env.get("PATH", "")]))
    env |= {name: source[name] for name in passed if name in source}
    env |= {"HOME": str(layout.home), "TMPDIR": str(layout.root / "tmp"),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "PYTHONUNBUFFERED": "1"}
    if telemetry_dsn:
        env[Env.TELEMETRY_DSN] = telemetry_dsn
    return env


def command_argv(command: Sequence[str], layout: Layout) -> list[str]:
    """The agent's argv: `{prompt}` and `{workspace}` stand for their paths (no other
    formatting, so braces elsewhere stay as written)."""
    return [part.replace("{prompt}", str(layout.prompt)).replace("{workspace}", str(layout.root))
            for part in command]


def run_agent(command: Sequence[str], layout: Layout, env: Mapping[str, str],
              timeout_s: float) -> AgentRun:
    """Run the agent in the workspace, the prompt on its stdin, its output to agent.log; at
    the time limit its whole process group is killed, and it is killed with this process
    (runtime.procs: a SIGKILLed runner left it running)."""
    log = layout.root / AGENT_LOG
    argv = command_argv(command, layout)
    if not _found(argv[0], env, layout.root):
        raise AgentFailed(f"cannot start the agent {argv[0]!r}: not found "
                          f"(PATH {env.get('PATH')!r})")
    with log.open("wb") as output, layout.prompt.open("rb") as prompt:
        try:
            process = subprocess.Popen(tied_argv(argv), cwd=layout.root, env=dict(env),
                                       stdin=prompt, stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        except OSError as error:
            raise AgentFailed(f"cannot start the agent {argv[0]!r}: {error.strerror or error}"
                              ) from None
        try:
            return AgentRun(process.wait(timeout=timeout_s), log)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return AgentRun(None, log)


def _found(program: str, env: Mapping[str, str], cwd: Path) -> bool:
    """Whether exec finds `program` as Popen would (a name on env's PATH, a path from cwd):
    the agent starts behind runtime.procs, so a missing one is not Popen's OSError."""
    if os.sep in program:
        return os.access(cwd / program, os.X_OK)
    return shutil.which(program, path=env.get("PATH", os.defpath)) is not None


def read_answer(layout: Layout, run: AgentRun, run_id: str) -> tuple[DiagnosisReport, bytes]:
    """The agent's report (checked) and its patch file's bytes (empty without one)."""
    if run.exit_code is None:
        raise AgentFailed(f"the agent did not finish in time; its output: {run.log}")
    path = layout.out / REPORT
    if not path.is_file():
        raise AgentFailed(f"the agent (exit {run.exit_code}) wrote no {path}; its output: "
                          f"{run.log}")
    report = parse_report(read_plain(path), str(path))  # a link the agent made is refused
    if report.run != run_id:
        raise AgentFailed(f"{path}: run {report.run!r} is not the run diagnosed, {run_id!r}")
    patch = layout.out / (report.patch or PATCH)
    if report.patch and not patch.exists():
        raise AgentFailed(f"{path}: patch {report.patch!r} names no file in {layout.out}")
    return report, read_plain(patch) if patch.exists() else b""


def save_answer(bundle: Folder, layout: Layout, report: DiagnosisReport, patch: bytes) -> None:
    """The answer beside the bundle (`diagnosis/`), replacing an earlier one and its
    decision: a new proposal waits for a new decision."""
    answer = bundle.child(DIAGNOSIS)
    for stale in ("decision.json", PATCH):
        if answer.exists(stale):
            answer.fs.rm(answer.path(stale))
    answer.write(REPORT, report.model_dump_json(indent=2).encode())
    if patch:
        answer.write(PATCH, patch)
    for name in (PROMPT, AGENT_LOG):
        if (layout.root / name).exists():  # the agent could have swapped either for a link
            answer.write(name, read_plain(layout.root / name)[-(4 << 20):])
