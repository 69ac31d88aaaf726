"""The parts of a diagnosis without a training run: the report's schema, the prompt, the
agent's environment and time limit, and the in-cluster Job's read-only RBAC."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.catalog import Catalog
from generator.diagnose.job import READ_ONLY_RULES, check_objects, diagnosis_objects
from generator.diagnose.settings import agent_settings
from generator.errors import BadRequest, CheckFailed
from generator.policies import check_job_policies, rbac_problems
from generator.tree import Tree
from runtime.crash.agent import AgentFailed, AgentRun, agent_env, read_answer, run_agent
from runtime.crash.bundle import Crash, write_bundle
from runtime.crash.launch import Launch
from runtime.crash.layout import Layout
from runtime.crash.prompt import write_prompt
from runtime.crash.report import parse_report
from runtime.errors import ConfigError, RuntimeFailure
from runtime.identity import Env
from runtime.run.config import build_config
from tests.cli.conftest import gkr as gkr_here
from tests.cli.test_gcs import BUCKET
from tests.crash.conftest import ROOT, driver_error, rank_zero_raises, scratch_repo

RUN = "crashy-0a1b2c"
GOOD = {"run": RUN, "root_cause": "the teacher's request budget ran out", "category": "config",
        "evidence": [{"claim": "rank 0 was refused", "source": "bundle/ranks/rank-0.json"}],
        "overrides": ["aux.services.teacher.options.max_requests=null"]}


def test_a_valid_report_parses_and_a_wrong_one_names_each_field() -> None:
    assert parse_report(json.dumps(GOOD)).overrides == GOOD["overrides"]
    bad = {**GOOD, "evidence": [], "category": "luck", "patch": "../x.diff",
           "overrides": ["checkpoint.uri=/elsewhere", "not an override"]}
    with pytest.raises(ConfigError) as raised:
        parse_report(json.dumps(bad), "out/report.json")
    fields = {problem.field for problem in raised.value.problems}
    assert fields == {"evidence", "category", "patch", "overrides"}
    assert "the relaunch sets checkpoint.uri itself" in str(raised.value)
    with pytest.raises(ConfigError, match="not JSON"):
        parse_report("{", "out/report.json")


def test_the_prompt_lists_the_failure_the_bundle_the_skills_and_the_answer(
        tmp_path: Path) -> None:
    layout = _workspace(tmp_path)
    run = write_prompt(layout, "a checkout of commit 0123456789ab")
    text = layout.prompt.read_text()
    assert run == RUN and f"Diagnose the failed training run `{RUN}`" in text
    assert "rank 0: teacher: RuntimeError: budget spent" in text
    assert "rank 0: failed (RuntimeFailure); its report: `bundle/ranks/rank-0.json`" in text
    assert "rank 1: died (RuntimeError); it wrote no report (its process died)" in text
    for skill in (f'gkr telemetry sql -p run={RUN} -- "$(cat bundle/telemetry/run_ranks.sql)"',
                  f"gkr stragglers {RUN}", "gkr telemetry ingest flight-recorder",
                  "gkr run --local train.yaml run.steps=6 run.name=crashy-repro"):
        assert skill in text, skill
    assert "out/report.json" in text and "report.schema.json" in text
    schema = json.loads(layout.schema.read_text())
    assert set(schema["required"]) == {"run", "root_cause", "category", "evidence"}


def _workspace(tmp_path: Path) -> Layout:
    """A workspace holding a bundle of a crashed run's config."""
    repo = scratch_repo(tmp_path / "repo")
    config = build_config({"run": {"name": "crashy"}, "crash": {"uri": str(tmp_path / "b")}})
    rank_zero_raises(config, RUN)
    launch = Launch(str(repo / "train.yaml"), ("run.steps=6",), cwd=str(repo))
    uri = write_bundle(Crash(config, RUN, driver_error(RUN), launch))
    assert uri is not None
    layout = Layout(tmp_path / "workspace").make()
    for path in Path(uri).rglob("*"):
        if path.is_file():
            target = layout.bundle / path.relative_to(uri)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
    return layout


def test_the_agent_gets_no_credentials_only_what_it_is_given(tmp_path: Path) -> None:
    layout = Layout(tmp_path).make()
    caller = {"PATH": "/usr/bin", "HOME": "/root", "GH_TOKEN": "t", "SSH_AUTH_SOCK": "/s",
              "KUBECONFIG": "/k", "GOOGLE_APPLICATION_CREDENTIALS": "/g",
              "ANTHROPIC_API_KEY": "key", Env.TELEMETRY_DSN: "http://ingest:pw@ch:8123/t"}
    env = agent_env(layout, ["ANTHROPIC_API_KEY"], "chdb:///runs/telemetry", caller, "/venv/bin")
    assert env["ANTHROPIC_API_KEY"] == "key" and env["PATH"] == "/venv/bin:/usr/bin"
    assert env["HOME"] == str(layout.home) and env[Env.TELEMETRY_DSN] == "chdb:///runs/telemetry"
    assert not {"GH_TOKEN", "SSH_AUTH_SOCK", "KUBECONFIG",
                "GOOGLE_APPLICATION_CREDENTIALS"} & set(env)


def test_the_agent_reads_its_prompt_and_a_late_one_is_stopped(tmp_path: Path) -> None:
    layout = Layout(tmp_path).make()
    layout.prompt.write_text(f"diagnose {RUN}\n")
    echo = [sys.executable, "-c", "import sys, pathlib; pathlib.Path('out/report.json')"
            ".write_text(sys.stdin.read() + open(sys.argv[1]).read())", "{prompt}"]
    done = run_agent(echo, layout, {"PATH": "/usr/bin"}, timeout_s=300)
    assert done.ok and (layout.out / "report.json").read_text() == f"diagnose {RUN}\n" * 2
    late = run_agent([sys.executable, "-c", "import time; time.sleep(600)"], layout, {},
                     timeout_s=0.5)
    assert late.exit_code is None
    with pytest.raises(AgentFailed, match="did not finish in time"):
        read_answer(layout, late, RUN)


def test_an_answer_for_another_run_or_without_its_patch_file_is_refused(
        tmp_path: Path) -> None:
    layout = Layout(tmp_path).make()
    finished = AgentRun(0, tmp_path / "agent.log")
    (layout.out / "report.json").write_text(json.dumps({**GOOD, "run": "other-run"}))
    with pytest.raises(AgentFailed, match="is not the run diagnosed"):
        read_answer(layout, finished, RUN)
    (layout.out / "report.json").write_text(json.dumps({**GOOD, "patch": "fix.diff"}))
    with pytest.raises(AgentFailed, match="names no file"):
        read_answer(layout, finished, RUN)
    (layout.out / "fix.diff").write_text("diff --git a/x b/x\n")
    report, patch = read_answer(layout, finished, RUN)
    assert report.patch == "fix.diff" and patch.startswith(b"diff --git")


def test_the_agent_command_comes_from_the_flag_the_environment_or_the_catalog() -> None:
    assert agent_settings("my-agent --fast", ROOT, {}).command == ("my-agent", "--fast")
    env = {Env.AGENT_COMMAND: "claude -p"}
    assert agent_settings(None, ROOT, env).command == ("claude", "-p")
    with pytest.raises(BadRequest, match="no agent command"):
        agent_settings(None, ROOT, {})  # the committed catalog names none


# --- the in-cluster Job ----------------------------------------------------------------------

def _objects(command: list[str] | None = None) -> list[dict[str, Any]]:
    catalog = Catalog(ROOT)
    return diagnosis_objects(catalog, catalog.clusters["usc1-prod"], "team-llm", RUN,
                             f"gs://bucket/runs/crashy/bundles/{RUN}",
                             command or ["claude", "-p"])


def test_the_in_cluster_job_may_only_read_pods_and_logs_and_holds_no_write_credentials(
        ) -> None:
    objects = {document["kind"]: document for document in _objects()}
    assert set(objects) == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    assert objects["Role"]["rules"] == [{"apiGroups": [""], "resources": ["pods", "pods/log"],
                                         "verbs": ["get", "list", "watch"]}]
    assert objects["RoleBinding"]["roleRef"]["kind"] == "Role"
    assert all(d["metadata"]["namespace"] == "team-llm" for d in objects.values())
    pod = objects["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    container = pod["containers"][0]
    env = {item["name"]: item for item in container["env"]}
    assert env[Env.TELEMETRY_DSN]["value"].startswith("http://reader:$(")
    secrets = [item["valueFrom"]["secretKeyRef"] for item in container["env"]
               if "valueFrom" in item]
    assert secrets == [{"name": "clickhouse-telemetry", "key": "reader-password",
                        "optional": True}]
    assert container["envFrom"] == [{"secretRef": {"name": "gkr-agent", "optional": True}}]
    assert container["command"][:4] == ["python", "-m", "runtime.crash",
                                        f"gs://bucket/runs/crashy/bundles/{RUN}"]
    assert container["command"][-3:] == ["--", "claude", "-p"]
    assert "@sha256:" in container["image"] and not container["securityContext"].get(
        "privileged")


def test_the_job_passes_the_policies_of_every_rendered_job_manifest() -> None:
    tree = Tree()
    tree.add(f"kustomize/overlays/usc1-prod/jobs/team-llm/{RUN}.yaml", _objects(), "test")
    assert check_job_policies(tree, Catalog(ROOT)) == []


@pytest.mark.parametrize("rule", [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]},
    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
])
def test_a_role_that_could_change_or_read_secrets_is_refused(rule: dict[str, Any]) -> None:
    catalog = Catalog(ROOT)
    objects = _objects()
    role = next(d for d in objects if d["kind"] == "Role")
    role["rules"] = [*READ_ONLY_RULES, rule]
    assert rbac_problems(role)
    with pytest.raises(CheckFailed, match="breaks policy"):
        check_objects(objects, catalog.clusters["usc1-prod"])


def test_cluster_wide_rbac_is_refused() -> None:
    assert rbac_problems({"kind": "ClusterRole", "rules": READ_ONLY_RULES})
    assert rbac_problems({"kind": "RoleBinding", "roleRef": {"kind": "ClusterRole"}})


def test_gkr_diagnose_prints_the_in_cluster_job_for_a_bundle_on_gs(
        emulator: str, tmp_path: Path) -> None:
    uri = f"gs://{BUCKET}/runs/crashy/bundles"
    config = build_config({"run": {"name": "crashy"}, "crash": {"uri": uri}})
    assert write_bundle(Crash(config, RUN, RuntimeFailure("boom"))) == f"{uri}/{RUN}"
    done = gkr_here("diagnose", RUN, "--bundle", f"{uri}/{RUN}", "--agent", "claude -p",
                    "--cluster", "usc1-prod", "-n", "team-llm", "--dry-run")
    assert done.code == 0, done.err
    kinds = [d["kind"] for d in yaml.safe_load_all(done.out)]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding", "Job"]



def test_the_in_cluster_entrypoint_runs_the_agent_and_answers_into_the_bundle(
        tmp_path: Path) -> None:
    """`python -m runtime.crash BUNDLE -- AGENT` as the Job runs it, on a local bundle folder
    (gs:// is the same code through fsspec) with an agent that writes a report and a patch."""
    layout = _workspace(tmp_path)
    bundle = str(tmp_path / "b" / RUN)
    agent = ("import json, pathlib; out = pathlib.Path('out'); "
             f"out.joinpath('report.json').write_text(json.dumps({GOOD!r} | "
             "{'patch': 'patch.diff'})); "
             "out.joinpath('patch.diff').write_text('diff --git a/x b/x\\n')")
    done = subprocess.run([sys.executable, "-m", "runtime.crash", bundle, "--workspace",
                           str(tmp_path / "job"), "--timeout", "300", "--", sys.executable,
                           "-c", agent], cwd=layout.root, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    answer = Path(bundle) / "diagnosis"
    assert json.loads((answer / "report.json").read_text())["root_cause"] == GOOD["root_cause"]
    assert (answer / "patch.diff").read_text().startswith("diff --git")
    assert f"Diagnose the failed training run `{RUN}`" in (answer / "prompt.md").read_text()
