"""Hostile and careless inputs (issue 11): each class of defect, with the file, line and field
it must be reported at, no traceback, nothing read from outside the repository and nothing
written. No test asserts a duration: bounded work is shown by memory and by the message."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
import yaml

from generator.catalog import Catalog
from generator.cluster.package import build_zip, local_folder
from generator.errors import BadRequest, CheckFailed, InvalidInput, Problem, StaleTree
from generator.output import write_tree
from generator.render import render_tree
from generator.validate import validate_repository, validate_specs
from generator.yamlio import MAX_BYTES, load_document
from runtime.identity import Env

GKR = str(Path(sys.executable).with_name("gkr"))
JOB_FILE = "kustomize/overlays/all-accelerators/jobs/team-ml/{}.yaml"
CLUSTER = "clusters/all-accelerators.yaml"
ACCELERATORS = "platform/catalog/accelerators.yaml"
SECRET = "root:$6$do-not-echo-this-hash:19000:0:99999:7:::"


def gkr(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GKR, *args], cwd=cwd, capture_output=True, text=True, check=False)


def problems_of(root: Path) -> list[Problem]:
    with pytest.raises(InvalidInput) as raised:
        render_tree(root, use_cache=False)
    return raised.value.problems


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def spec_text(**fields: object) -> str:
    base = {"kind": "rayjob", "cluster": "all-accelerators", "owner": "alice@reve.ai",
            "pods": 2, "accelerator": "H200", "image": "trainer", "cmd": "python train.py"}
    return yaml.safe_dump({**base, **fields}, sort_keys=False)


@pytest.fixture
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file outside the repository (which is `tmp_path`) whose content must never be read
    into a message."""
    path = tmp_path_factory.mktemp("outside") / "shadow"
    path.write_text(f"{SECRET}\nkind: rayjob\n")
    return path


# Reading outside the repository ---------------------------------------------------------


def test_a_spec_symlinked_out_of_the_repository_is_refused_unread(repo, secret) -> None:
    link = repo.root / "jobs/ml/leak.yaml"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    (problem,) = problems_of(repo.root)
    assert problem.file == "jobs/ml/leak.yaml" and "symbolic link out of the repository" in \
        problem.message
    result = gkr("render", cwd=repo.root)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert SECRET not in result.stdout + result.stderr and "do-not-echo" not in result.stderr


def test_env_files_stay_inside_the_repository(repo, spec, secret) -> None:
    path = repo.write_spec("uses-env", spec(env_file="env/run.yaml"))
    (path.parent / "env").mkdir()
    (path.parent / "env/run.yaml").symlink_to(secret)
    (problem,) = problems_of(repo.root)
    assert (problem.file, problem.field) == ("jobs/ml/uses-env.yaml", "env_file")
    assert problem.line == line_of(path.read_text(), "env_file")
    assert "symbolic link out of the repository" in problem.message
    assert SECRET not in str(problem)
    path.write_text(spec_text(env_file=str(secret)))  # absolute: refused before reading
    (problem,) = problems_of(repo.root)
    assert "relative to the spec file" in problem.message and SECRET not in str(problem)


def test_a_catalog_file_symlinked_out_is_refused(repo, secret) -> None:
    (repo.root / "clusters/stolen.yaml").symlink_to(secret)
    repo.write_spec("a", spec_text())
    (problem,) = problems_of(repo.root)
    assert problem.file == "clusters/stolen.yaml" and "out of the repository" in problem.message


def test_working_dir_outside_the_repository_and_cwd_is_refused(repo, tmp_path, secret) -> None:
    assert local_folder("/nonexistent-in-image", [repo.root]) is None  # a path in the image
    with pytest.raises(BadRequest, match="outside the repository and the current directory"):
        local_folder(str(secret.parent), [repo.root])
    code = repo.root / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    assert local_folder(str(code), [repo.root]) == code.resolve()
    (code / "shadow").symlink_to(secret)
    with pytest.raises(BadRequest, match="link out of the folder"):
        build_zip(code)


# Tracebacks instead of file:line errors ---------------------------------------------------

MERGED = """\
kind: rayjob
cluster: all-accelerators
owner: alice@reve.ai
accelerator: H200
image: trainer
cmd: python train.py
pods: 2
labels: &common
  bad key: v
  team: vision
env:
  <<: *common
  team: ml
"""


def test_merge_keys_are_supported_and_located(repo) -> None:
    data, lines = load_document("f.yaml", MERGED)
    assert data["env"] == {"team": "ml", "bad key": "v"}  # the mapping's own keys win
    assert lines[("env", "bad key")] == 9 and lines[("env", "team")] == 13
    repo.write_spec("merged", MERGED)
    problems = problems_of(repo.root)
    assert {(p.field, p.line) for p in problems} == {("labels.bad key", 9), ("env.bad key", 9)}


def test_merge_keys_in_a_cluster_file_load(repo) -> None:
    path = repo.root / CLUSTER
    text = path.read_text().replace("head_pool:\n  name: ray-heads\n",
                                    "head_pool:\n  <<: {name: ray-heads}\n")
    path.write_text(text)
    assert Catalog(repo.root).clusters["all-accelerators"].head_pool.name == "ray-heads"


MALFORMED = [
    ("python-tag", b"kind: !!python/object/apply:os.system [id]\n", 1, "not allowed"),
    ("python-name", b"cluster: x\ncmd: !!python/name:os.system\n", 2, "not allowed"),
    ("custom-tag", b"kind: !Ref job\n", 1, "not allowed"),
    ("latin-1", b"kind: job\nowner: caf\xe9@x.io\n", 2, "not UTF-8"),
    ("utf-16", "kind: job\n".encode("utf-16"), 1, "not UTF-8"),
    ("control-char", b"kind: job\ncmd: a\x07b\n", 2, "control character"),
    ("duplicate-key", b"kind: job\npods: 1\npods: 2\n", 3, "duplicate key 'pods'"),
    ("two-documents", b"kind: job\n---\nkind: job\n", 2, "a second YAML document"),
    ("bad-alias", b"kind: *nowhere\n", 1, "names no anchor"),
    ("list-key", b"? [a, b]\n: 1\n", 1, "must be a plain value"),
    ("bad-merge", b"head:\n  <<: 3\n", 2, "merge key"),
    ("syntax", b"kind: [job\n", 2, "not valid YAML"),
    ("huge-number", b"pods: " + b"9" * 70 + b"\n", 1, "more than 64 digits"),
]


@pytest.mark.parametrize(("content", "line", "words"), [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_malformed_files_are_file_line_errors(repo, content, line, words) -> None:
    path = repo.root / "jobs/ml/bad.yaml"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    before = repo.snapshot()
    problems = problems_of(repo.root)
    assert [(p.file, p.line) for p in problems if words in p.message] == [
        ("jobs/ml/bad.yaml", line)], problems
    assert repo.snapshot() == before


@pytest.mark.parametrize("kind", ["dangling", "directory", "fifo"])
def test_odd_files_at_a_spec_path_are_reported(repo, tmp_path, kind) -> None:
    path = repo.root / "jobs/ml/odd.yaml"
    path.parent.mkdir(parents=True)
    if kind == "dangling":
        path.symlink_to(tmp_path / "gone.yaml")
    elif kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # reading it would block forever
    (problem,) = problems_of(repo.root)
    assert problem.file == "jobs/ml/odd.yaml"
    assert {"dangling": "missing file", "directory": "a directory",
            "fifo": "not a regular file"}[kind] in problem.message


def test_odd_file_names_are_reported_exactly(repo) -> None:
    repo.write_spec("train[v2]", spec_text())
    problems = problems_of(repo.root)
    assert {p.file for p in problems} == {"jobs/ml/train[v2].yaml"}
    result = gkr("render", cwd=repo.root)
    assert "jobs/ml/train[v2].yaml" in result.stderr and "Traceback" not in result.stderr


def test_allocatable_below_the_sidecars_is_a_catalog_error(repo) -> None:
    path = repo.root / ACCELERATORS
    text = path.read_text().replace("allocatable: {cpus: 200, memory: 1690Gi}",
                                    "allocatable: {cpus: 2, memory: 1690Gi}", 1)
    path.write_text(text)
    repo.write_spec("a", spec_text())
    problems = problems_of(repo.root)
    assert [(p.file, p.field, p.line) for p in problems] == [
        (ACCELERATORS, "accelerators.H100.allocatable", line_of(text, "cpus: 2,"))]
    assert "sidecars' requests" in problems[0].message


# Resource exhaustion ---------------------------------------------------------------------

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))


def test_an_alias_bomb_fails_fast_with_its_line(repo) -> None:
    path = repo.root / "jobs/ml/bomb.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(BOMB)  # 10**9 values once expanded
    tracemalloc.start()
    try:
        problems = problems_of(repo.root)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(p.file, p.line) for p in problems] == [("jobs/ml/bomb.yaml", 5)]
    assert "alias bomb" in problems[0].message
    assert peak < 64 * 2**20  # bounded: not the gigabytes the expansion would take


@pytest.mark.parametrize(("text", "words"), [
    ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 100)), "nested deeper"),
    ("[" * 5000 + "]" * 5000, "not valid YAML"),
    ("x: " + "y" * (MAX_BYTES + 1), f"at most {MAX_BYTES}"),
])
def test_deep_or_huge_files_are_refused(repo, text, words) -> None:
    path = repo.root / "jobs/ml/big.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    (problem,) = problems_of(repo.root)
    assert problem.file == "jobs/ml/big.yaml" and words in problem.message


# Silent acceptance ------------------------------------------------------------------------

ENV_FILE = "GOOD: 'yes'\n'': empty\nA=B: x\nGKR_JOB: mine\nCOUNT: 3\n"


def test_env_file_names_and_values_are_checked_with_their_lines(repo, spec) -> None:
    path = repo.write_spec("uses-env", spec(env_file="env/run.yaml"))
    (path.parent / "env").mkdir()
    (path.parent / "env/run.yaml").write_text(ENV_FILE)
    problems = problems_of(repo.root)
    assert [(p.file, p.line, p.field) for p in problems] == [
        ("jobs/ml/env/run.yaml", 2, ""), ("jobs/ml/env/run.yaml", 3, "A=B"),
        ("jobs/ml/env/run.yaml", 4, "GKR_JOB"), ("jobs/ml/env/run.yaml", 5, "COUNT")]
    assert "set by GKR" in problems[2].message and "not a string" in problems[3].message


def test_a_label_key_prefix_over_253_characters_is_refused(repo, spec) -> None:
    prefix = ".".join(["a" * 60] * 5)  # 304 characters, each part a valid DNS label
    path = repo.root / "jobs/ml/labelled.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(spec_text() + f"labels:\n  {prefix}/team: ml\n")
    (problem,) = problems_of(repo.root)
    assert problem.field == f"labels.{prefix}/team" and "at most 253" in problem.message
    assert problem.line == line_of(path.read_text(), "/team:")


def test_an_object_over_the_api_server_limit_is_refused(repo, spec) -> None:
    repo.write_spec("huge", spec(env={"BLOB": "x" * 800_000}))  # in the head and the workers
    (problem,) = problems_of(repo.root)
    assert (problem.file, problem.field) == ("jobs/ml/huge.yaml", "RayJob/huge")
    assert "Kubernetes stores at most" in problem.message


CATALOG_MISTAKES = [
    # (file, old text, new text, field, words, the text marking the line)
    (CLUSTER, "  ml: {namespace: team-ml, queue: ml}",
     "  ml: {namespace: team-ml, queue: ml}\n  ops: {namespace: team-ml, queue: ops}",
     "teams.ops.namespace", "already the namespace of team 'ml'", "ops:"),
    (CLUSTER, "node_pool: a3m", "node_pool: a3h  # taken", "accelerators.H100-Mega.node_pool",
     "already the node pool of H100", "# taken"),
    (CLUSTER, "    reservation: projects/gkr-test/reservations/a4",
     "    reservation: projects/gkr-test/reservations/a4\n    zone: us-east1-b",
     "accelerators.B200.zone", "not one of the cluster's zones", "us-east1-b"),
    (CLUSTER, "head_defaults: {cpus: 8, memory: 32Gi}", "head_defaults: {cpus: 8, memory: 1Ti}",
     "head_pool.head_defaults.memory", "at most 110Gi", "head_defaults"),
    (CLUSTER, "  ml: {namespace: team-ml, queue: ml}",
     "  ml: {namespace: team-ml, queue: ml}\n  ML Team: {namespace: team-x, queue: x}",
     "teams.ML Team", "not a valid label value", "ML Team"),
    (CLUSTER, "zones: [us-central1-a]", "zones: [us-central1-a, europe-west4-b]", "zones.1",
     "not a zone of the region", "zones:"),
    (ACCELERATORS, "    gpus_per_node: 8", "    gpus_per_node: 4",
     "accelerators.H100.gpus_per_node", "a3-highgpu-8g has 8 GPUs", "gpus_per_node: 4"),
    (ACCELERATORS, "machine_type: a3-highgpu-8g", "machine_type: a3-bespoke-8g",
     "accelerators.H100.machine_type", "not a GPU machine type", "a3-bespoke"),
    # The preflight's bus-bandwidth threshold: positive, and never left out.
    (ACCELERATORS, "preflight: {min_busbw_gbps: 40,", "preflight: {min_busbw_gbps: -40,",
     "accelerators.H100.preflight.min_busbw_gbps", "greater than 0", "min_busbw_gbps: -40"),
    (ACCELERATORS, "preflight: {min_busbw_gbps: 40, message_mib: 256}",
     "preflight: {message_mib: 256}", "accelerators.H100.preflight.min_busbw_gbps",
     "required field is missing", "preflight: {message_mib: 256}"),
]


@pytest.mark.parametrize(("file", "old", "new", "field", "words", "marker"), CATALOG_MISTAKES,
                         ids=[m[3] for m in CATALOG_MISTAKES])
def test_catalog_contradictions_name_file_line_and_field(
    repo, file, old, new, field, words, marker
) -> None:
    path = repo.root / file
    text = path.read_text()
    if field == "accelerators.B200.zone":  # a second zone key would be a duplicate
        text = text.replace("compact_placement: true\n    gpu_networks: [rdma-0",
                            "compact_placement: true\n    gpu_networks: [rdma-0", 1)
        old, new = "zone: us-central1-a\n    reservation: projects/gkr-test/reservations/a4", \
            "zone: us-east1-b\n    reservation: projects/gkr-test/reservations/a4"
    assert old in text
    text = text.replace(old, new, 1)
    path.write_text(text)
    repo.write_spec("a", spec_text())
    problems = [p for p in problems_of(repo.root) if p.field == field]
    assert problems and words in problems[0].message, problems
    assert problems[0].file == file and problems[0].line == line_of(text, marker)


def head_env(rayjob: dict) -> dict[str, str]:
    """The literal variables of a RayJob's head container, as its processes see them: the
    kubelet reduces `$$` to `$` (generator.pods.literal_env)."""
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    return {e["name"]: e["value"].replace("$$", "$") for e in head["containers"][0]["env"]
            if "value" in e}


def test_one_meaning_of_cmd_a_shell_command_line_for_every_kind(repo, spec) -> None:
    cmd = 'python train.py --name "run one" | tee log.$$ && echo "$GKR_JOB" $(GKR_JOB)'
    repo.write_spec("as-job", spec(kind="job", pods=1, cmd=cmd))
    repo.write_spec("as-rayjob", spec(cmd=cmd))
    tree = render_tree(repo.root, use_cache=False)
    job, _policy = tree.manifests[JOB_FILE.format("as-job")]
    rayjob, _policy = tree.manifests[JOB_FILE.format("as-rayjob")]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["/bin/sh", "-c", cmd]
    # The RayJob's entrypoint is the preflight gate, which runs cmd with /bin/sh -c as Ray
    # runs an entrypoint (runtime.preflight.gate).
    assert rayjob["spec"]["entrypoint"] == "python -m runtime.preflight.gate"
    assert head_env(rayjob)[Env.ENTRYPOINT] == cmd


@pytest.mark.parametrize("cmd", ["@gkr-embed-0@", "!embed 0", "!embed 1", '"!embed 0"'])
def test_user_text_never_collides_with_embedded_documents(repo, spec, cmd) -> None:
    repo.write_spec("embedded", spec(cmd=cmd, env={"X": cmd}, labels={"tag": "embed-0"}))
    rayjob, _policy = render_tree(repo.root, use_cache=False).manifests[JOB_FILE.format("embedded")]
    assert head_env(rayjob)[Env.ENTRYPOINT] == cmd
    worker = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert {"name": "X", "value": cmd} in worker["containers"][0]["env"]


@pytest.mark.parametrize(("place", "words"), [
    ("jobs/ml/nested/train.yaml", "this file is not read"),
    ("jobs/ml/train.YAML", "lower-case .yaml"),
    ("jobs/train.yaml", "jobs/<team>/<name>.yaml"),
])
def test_specs_where_render_does_not_look_are_reported_by_render_and_validate(
    repo, place, words
) -> None:
    path = repo.root / place
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(spec_text())
    (repo.root / "jobs/ml/env").mkdir(parents=True, exist_ok=True)
    (repo.root / "jobs/ml/env/shared.yaml").write_text("A: b\n")  # env files are fine
    (problem,) = problems_of(repo.root)
    assert problem.file == place and words in problem.message
    with pytest.raises(InvalidInput) as raised:
        validate_specs(repo.root, [path])
    assert [p.file for p in raised.value.problems] == [place]


def test_a_file_that_is_no_spec_is_not_validated_as_one(repo) -> None:
    env = repo.root / "jobs/ml/env/run.yaml"
    env.parent.mkdir(parents=True)
    env.write_text("A: b\n")
    with pytest.raises(InvalidInput, match="not a spec"):
        validate_specs(repo.root, [env])
    with pytest.raises(InvalidInput, match="not a spec"):
        validate_specs(repo.root, [repo.root / CLUSTER])


# `gkr validate` trust --------------------------------------------------------------------


@pytest.fixture
def rendered(repo, spec):
    repo.write_spec("ok", spec())
    write_tree(repo.root, render_tree(repo.root))
    return repo


def test_validate_checks_the_committed_kustomization(rendered) -> None:
    overlay = rendered.root / "kustomize/overlays/all-accelerators/kustomization.yaml"
    overlay.write_text(overlay.read_text() + "- jobs/team-ml/not-there.yaml\n")
    with pytest.raises(CheckFailed) as raised:
        validate_repository(rendered.root)
    message = str(raised.value)
    assert "kustomize/overlays/all-accelerators/kustomization.yaml: kubectl kustomize failed" \
        in message and "stale" in message
    result = gkr("validate", cwd=rendered.root)
    assert result.returncode == 5 and "Traceback" not in result.stderr


def test_validate_checks_committed_manifests_not_a_fresh_render(rendered) -> None:
    path = rendered.root / JOB_FILE.format("ok")
    path.write_text(path.read_text().replace("privileged: false", "privileged: true", 1)
                    .replace("gkr.dev/job: ok", "gkr.dev/job: not ok", 1))
    with pytest.raises(CheckFailed) as raised:
        validate_repository(rendered.root, kustomize=False)
    assert "not a valid label value" in str(raised.value)


def test_validate_says_when_the_tree_on_disk_is_stale(rendered, spec) -> None:
    assert validate_repository(rendered.root, kustomize=False).specs == 1
    rendered.write_spec("ok", spec(pods=3))
    with pytest.raises(StaleTree, match=r"stale: .*/ok\.yaml differ from a fresh render"):
        validate_repository(rendered.root, kustomize=False)
    result = gkr("validate", "--no-kustomize", cwd=rendered.root)
    assert result.returncode == 3 and "gkr render" in result.stderr


def test_validate_path_names_what_it_skipped(rendered) -> None:
    report = validate_specs(rendered.root, [rendered.root / "jobs/ml/ok.yaml"])
    assert (report.specs, report.manifests) == (1, 2)  # the RayJob and its NetworkPolicy
    assert "kubectl kustomize" in report.summary() and "without paths" in report.summary()


@pytest.mark.parametrize("entry", ["https://github.com/x/y//deploy?ref=main",
                                   "../../../../../etc", "/etc/kubernetes"])
def test_validate_does_not_build_a_kustomization_that_reaches_outside(rendered, entry) -> None:
    overlay = rendered.root / "kustomize/overlays/all-accelerators/kustomization.yaml"
    overlay.write_text(overlay.read_text() + f"- {entry}\n")
    with pytest.raises(CheckFailed, match="not a path inside the repository; not built"):
        validate_repository(rendered.root)
