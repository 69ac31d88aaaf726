"""A deterministic TEST AGENT for `gkr diagnose`: a script standing in for an LLM agent in the
crash tests. Not for real use; it knows one failure only.

It does what the prompt asks of any agent, by fixed rules: it reads the failed ranks' reports
in the bundle, runs one of the listed telemetry queries with `gkr telemetry sql` (through the
read-only DSN it was given), recognises the teacher's spent request budget
(tests/crash/teacher.py), fixes the config file in its checkout of the run's code, and writes
`out/report.json`. It exits 3 if it finds a credential in its environment, so a test that
puts one in gkr's environment proves that the agent never sees it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

# What gkr must keep from an agent: git, cloud and cluster credentials.
CREDENTIALS = ("SSH_AUTH_SOCK", "GH_TOKEN", "GITHUB_TOKEN", "GIT_ASKPASS", "KUBECONFIG",
               "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG")
BUDGET = re.compile(r"options\.max_requests=(\d+)")


def main() -> int:
    leaked = [name for name in CREDENTIALS if name in os.environ]
    if leaked:
        print(f"test agent: credentials in my environment: {leaked}", file=sys.stderr)
        return 3
    prompt, workspace = sys.stdin.read(), Path.cwd()
    manifest = json.loads((workspace / "bundle" / "bundle.json").read_text())
    run = manifest["run"]
    if run not in prompt or "out/report.json" not in prompt:
        print("test agent: the prompt does not name the run and the answer", file=sys.stderr)
        return 4
    source, message = _first_report(workspace, manifest)
    query = _ranks_query(workspace, run)
    budget = BUDGET.search(message)
    report = _diagnosis(workspace, manifest, source, message, query) if budget else \
        _unknown(run, source, message, query)
    (workspace / "out" / "report.json").write_text(json.dumps(report, indent=2))
    print(f"test agent: {report['root_cause']}")
    return 0


def _first_report(workspace: Path, manifest: dict[str, Any]) -> tuple[str, str]:
    """The lowest failed rank's own report: its path and its exception's message."""
    reports = manifest["failure"]["reports"]
    if not reports:
        return "bundle/failure.json", manifest["failure"]["summary"]
    body = json.loads((workspace / "bundle" / reports[0]).read_text())
    return f"bundle/{reports[0]}", body["exception"]["message"]


def _ranks_query(workspace: Path, run: str) -> dict[str, Any]:
    """Run the bundle's run_ranks query, as the prompt's skills say."""
    sql = (workspace / "bundle" / "telemetry" / "run_ranks.sql").read_text()
    done = subprocess.run([sys.executable, "-c", "from generator.cli import main; main()",
                           "telemetry", "sql", "-p", f"run={run}", "-o", "json", "--", sql],
                          capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        return {"name": "run_ranks", "sql": sql, "parameters": {"run": run},
                "finding": f"the query failed: {done.stderr.strip()[-500:]}"}
    rows = json.loads(done.stdout)
    reached = ", ".join(f"rank {row['rank']} reached step {row['last_step']}" for row in rows)
    return {"name": "run_ranks", "sql": sql, "parameters": {"run": run},
            "finding": reached or "no step rows"}


def _diagnosis(workspace: Path, manifest: dict[str, Any], source: str, message: str,
               query: dict[str, Any]) -> dict[str, Any]:
    """The budget found: fix it in the config file of the checkout."""
    launch = manifest["config"]["launch"]
    config = Path(launch["config"]).relative_to(manifest["code"]["root"])
    path = workspace / "code" / config
    path.write_text(re.sub(r"max_requests: \d+", "max_requests: null", path.read_text()))
    return {
        "run": manifest["run"], "category": "config", "confidence": "high",
        "root_cause": "The teacher service is configured with a smoke-test request budget "
                      f"(aux.services.teacher.options.max_requests in {config}); once it was "
                      "spent, every rank's request failed and the run crashed.",
        "evidence": [{"claim": "the rank's request to the teacher was refused", "source": source,
                      "excerpt": message},
                     {"claim": "where the ranks stopped", "source": "query:run_ranks",
                      "excerpt": query["finding"]}],
        "queries": [query],
        "overrides": ["aux.services.teacher.options.max_requests=null"],
        "spec_change": "", "reproduced": False,
    }


def _unknown(run: str, source: str, message: str, query: dict[str, Any]) -> dict[str, Any]:
    return {"run": run, "category": "unknown", "confidence": "low",
            "root_cause": f"not a failure this test agent knows: {message[:200]}",
            "evidence": [{"claim": "the first failed rank's error", "source": source,
                          "excerpt": message}], "queries": [query]}


if __name__ == "__main__":
    sys.exit(main())
