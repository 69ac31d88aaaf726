"""Spec rules: each mistake a researcher can make gives file:line, the field, what is allowed."""

from __future__ import annotations

import pytest

from generator.errors import InvalidInput
from generator.render import render_tree

# (changes to a valid spec, field named in the error, words the message must contain)
MISTAKES = [
    ({"name": "Bad_Name"}, "name", "DNS-1035"),
    ({"name": "x" * 48}, "name", "at most 47"),
    ({"kind": "raycluster", "name": "x" * 54}, "name", "at most 53"),
    ({"kind": "deployment"}, "kind", "'rayjob', 'raycluster' or 'job'"),
    ({"cluster": "nowhere"}, "cluster", "known: all-accelerators"),
    ({"namespace": "team-other"}, "namespace", "deploys into 'team-ml' only"),
    ({"accelerator": "TPU"}, "accelerator", "not offered"),
    ({"accelerator": None, "gpus": 8}, "gpus", "GPUs need an accelerator"),
    ({"gpus": 16}, "gpus", "has 8"),
    ({"gpus": 4}, "gpus", "whole nodes"),
    ({"gpus": 0}, "gpus", "drop `accelerator`"),
    ({"pods": 9}, "pods", "has 4 nodes"),
    ({"cpus": 500}, "cpus", "at most 216"),
    ({"memory": "9Ti"}, "memory", "at most 2680Gi"),
    ({"memory": "lots"}, "memory", "not a Kubernetes quantity"),
    ({"head": {"cpus": 64}}, "head.cpus", "at most 30"),
    ({"head": {"gpus": 1}}, "head.gpus", "unknown field; allowed: cpus, memory"),
    ({"image": "trainer:latest"}, "image", "not pinned"),
    ({"cmd": None}, "cmd", "needs a command"),
    ({"kind": "raycluster", "deadline": "1d"}, "deadline", "lives until deleted"),
    ({"deadline": "soon"}, "deadline", "not a duration"),
    ({"kind": "job", "relaunch_reservation": "1h"}, "relaunch_reservation", "only a rayjob"),
    ({"pods": 1, "rack_affinity": {"level": "block"}}, "rack_affinity", "more than one pod"),
    ({"rack_affinity": {"level": "rack"}}, "rack_affinity.level", "'block', 'subblock'"),
    ({"env": {"GKR_JOB": "x"}}, "env.GKR_JOB", "set by GKR"),
    ({"env": {"BAD-NAME": "x"}}, "env.BAD-NAME", "valid variable name"),
    ({"env": {"N": 3}}, "env.N", "valid string"),
    ({"working_dir": "relative/path"}, "working_dir", "absolute path"),
    ({"labels": {"gkr.dev/job": "x"}}, "labels.gkr.dev/job", "reserved"),
    ({"labels": {"team": "has space"}}, "labels.team", "not a valid label value"),
    ({"owner": "alice"}, "owner", "should match pattern"),
    ({"preemptible": "yes"}, "preemptible", "valid boolean"),
    ({"pods": "2"}, "pods", "valid integer"),
    ({"gpuz": 8}, "gpuz", "unknown field; allowed: accelerator"),
    ({"env_file": "missing.yaml"}, "env_file", "not found"),
    # What the API server or a shell would refuse later is refused here (issue 11).
    ({"env_file": "/etc/gkr-secrets.yaml"}, "env_file", "relative to the spec file"),
    ({"env_file": "../../../outside.yaml"}, "env_file", "outside the repository"),
    ({"cmd": "   "}, "cmd", "an empty command"),
    # The preflight's policy (runtime.preflight.gate), and where it means nothing.
    ({"preflight": {"on_failure": "sometimes"}}, "preflight.on_failure", "'retry' or 'teardown'"),
    ({"preflight": {"attempts": 0}}, "preflight.attempts", "greater than or equal to 1"),
    ({"preflight": {"replacement_timeout": "soon"}}, "preflight.replacement_timeout",
     "not a duration"),
    ({"preflight": {"retries": 2}}, "preflight.retries", "unknown field; allowed: attempts"),
    ({"kind": "job", "preflight": {"on_failure": "retry"}}, "preflight", "only a rayjob is gated"),
    ({"cmd": "python -c 'print(1)"}, "cmd", "no closing quotation"),
    ({"kind": "job", "cmd": "echo \"unbalanced"}, "cmd", "not a valid shell command line"),
    ({"kind": "raycluster", "cmd": "python x.py"}, "cmd", "runs no command"),
    ({"kind": "raycluster", "cmd": None, "retries": 2}, "retries", "not retried"),
    ({"kind": "raycluster", "cmd": None, "working_dir": "gs://b/code.zip"}, "working_dir",
     "cannot fetch a remote working_dir"),
    ({"accelerator": None, "rack_affinity": {"level": "host"}}, "rack_affinity", "CPU-only"),
    ({"deadline": "30000d"}, "deadline", "at most 2147483647 s"),
    ({"ttl": "99999999999s"}, "ttl", "not a duration"),
    ({"deadline": " 1d"}, "deadline", "not a duration"),
    ({"cpus": 0.0004}, "cpus", "finer than 1m"),
    ({"cpus": "0.5m"}, "cpus", "finer than 1m"),
    ({"memory": " 512Gi"}, "memory", "not a Kubernetes quantity"),
    ({"memory": "1e3Gi"}, "memory", "not a Kubernetes quantity"),
    ({"memory": "\uff15\uff11\uff12Gi"}, "memory", "not a Kubernetes quantity"),
    ({"memory": "512Gi\n"}, "memory", "not a Kubernetes quantity"),
    ({"env": {"1X": "x"}}, "env.1X", "not a valid variable name"),
    ({"env": {"A=B": "x"}}, "env.A=B", "not a valid variable name"),
    ({"env": {"NUL": "a\0b"}}, "env.NUL", "NUL character"),
    ({"labels": {"Bad..Prefix/x": "v"}}, "labels.Bad..Prefix/x", "prefix must be a DNS"),
    ({"labels": {"x" * 64: "v"}}, "labels." + "x" * 64, "not a valid key"),
    ({"name": "ok\n"}, "name", "DNS-1035"),
    ({"image": "r@sha256:" + "a" * 64 + "\n"}, "image", "not pinned"),
]


@pytest.mark.parametrize(("changes", "field", "words"), MISTAKES,
                         ids=[m[1] + ":" + m[2][:20] for m in MISTAKES])
def test_mistake_is_reported_with_line_and_field(repo, spec, changes, field, words) -> None:
    # The file is named after the spec (names default to the file name).
    data = spec(**changes)
    path = repo.write_spec(data.pop("name", "job-under-test"), data)
    before = repo.snapshot()
    with pytest.raises(InvalidInput) as raised:
        render_tree(repo.root, use_cache=False)
    problems = [p for p in raised.value.problems if p.field == field]
    assert problems, f"no problem on {field}: {raised.value}"
    problem = problems[0]
    assert words in problem.message
    assert problem.file == path.relative_to(repo.root).as_posix()
    assert problem.line == _line_of(path.read_text(), field)
    assert repo.snapshot() == before


def _line_of(text: str, field: str) -> int | None:
    """Line of a (dotted) field in a block-style YAML file; None when the file omits it."""
    lines, line = text.splitlines(), 0
    head, _, rest = field.partition(".")
    keys = [head, rest] if head in ("labels", "env") else field.split(".")
    for key in keys:
        found = [i for i in range(line, len(lines))
                 if lines[i].lstrip().startswith((f"{key}:", f"'{key}':"))]
        if not found:
            return None
        line = found[0]
    return line + 1


def test_every_problem_of_every_spec_is_reported_at_once(repo, spec) -> None:
    repo.write_spec("first", spec(gpus=16))
    repo.write_spec("second", spec(image="trainer:latest", cpus=999))
    with pytest.raises(InvalidInput) as raised:
        render_tree(repo.root, use_cache=False)
    fields = sorted((p.file, p.field) for p in raised.value.problems)
    assert fields == [("jobs/ml/first.yaml", "gpus"), ("jobs/ml/second.yaml", "cpus"),
                      ("jobs/ml/second.yaml", "image")]


def test_yaml_syntax_error_names_the_line(repo) -> None:
    repo.write_spec("broken", "kind: rayjob\ncluster: [unclosed\nowner: a@b.c\n")
    with pytest.raises(InvalidInput) as raised:
        render_tree(repo.root, use_cache=False)
    (problem,) = raised.value.problems
    assert problem.file == "jobs/ml/broken.yaml" and problem.line == 3
    assert "not valid YAML" in problem.message


def test_spec_outside_a_team_of_the_cluster_is_refused(repo, spec) -> None:
    repo.write_spec("intruder", spec(), team="finance")
    with pytest.raises(InvalidInput, match="team 'finance' has no namespace"):
        render_tree(repo.root, use_cache=False)


def test_catalog_mistake_names_the_catalog_file(repo) -> None:
    path = repo.root / "clusters/all-accelerators.yaml"
    path.write_text(path.read_text().replace("gpu_networks: [vpc-1, vpc-2, vpc-3, vpc-4]",
                                             "gpu_networks: [vpc-1]"))
    with pytest.raises(InvalidInput) as raised:
        render_tree(repo.root, use_cache=False)
    (problem,) = raised.value.problems
    assert problem.file == "clusters/all-accelerators.yaml"
    assert problem.field == "accelerators.H100.gpu_networks"
    assert "exactly 4 networks" in problem.message and problem.line == 19
