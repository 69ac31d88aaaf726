"""A hostile agent and a hostile bundle: git in the agent's checkout that nothing planted
can steer, approvals bound to what was reviewed, agent text escaped on the terminal,
downloads that stay in their folder, and bundles without secrets. Real git, real fsspec
filesystems (local and in-memory), the real CLI in this process."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.diagnose import flow
from generator.diagnose.review import ChangesNotRecorded, ProposalChanged, load_proposal
from generator.diagnose.workspace import changes_since, check_patch, clone_code
from runtime.crash.agent import DIAGNOSIS, AgentRun, read_answer
from runtime.crash.bundle import Crash, write_bundle
from runtime.crash.capture import rank_failures
from runtime.crash.code import identify
from runtime.crash.display import visible
from runtime.crash.files import BundleError, Folder, check_name, write_below
from runtime.crash.index import Bundle, open_bundle
from runtime.crash.launch import Launch
from runtime.crash.layout import Layout
from runtime.crash.redact import redact
from runtime.errors import RuntimeFailure
from tests.cli.conftest import gkr as gkr_here
from tests.crash.conftest import RUN, config_for, driver_error, scratch_repo

GH_TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2  # token-shaped, planted in the user's env
GOOGLE = "/secrets/planted-google-credentials.json"


# --- git in the agent's checkout ------------------------------------------------------------

def _witness_script(folder: Path, name: str) -> Path:
    """A program that, if anything runs it, writes the environment it got to `folder`."""
    script = folder / f"{name}.sh"
    script.write_text(f"#!/bin/sh\nenv > '{folder}/ran-{name}'\nexit 0\n")
    script.chmod(0o755)
    return script


def _plant(code: Path, witness: Path) -> None:
    """What a hostile agent leaves in its clone's .git: an fsmonitor, hooks, an external diff,
    a textconv and a clean filter for every file."""
    hooks = witness / "hooks"
    hooks.mkdir()
    for hook in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction"):
        _witness_script(hooks, hook).rename(hooks / hook)
        (code / ".git" / "hooks" / hook).write_text((hooks / hook).read_text())
        (code / ".git" / "hooks" / hook).chmod(0o755)
    run = {name: _witness_script(witness, name) for name in
           ("fsmonitor", "external", "textconv", "clean")}
    with (code / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {run['fsmonitor']}\n\thooksPath = {hooks}\n"
                     f"[diff]\n\texternal = {run['external']}\n"
                     f"[diff \"evil\"]\n\ttextconv = {run['textconv']}\n"
                     f"[filter \"evil\"]\n\tclean = {run['clean']}\n\trequired = true\n")
    (code / ".git" / "info").mkdir(exist_ok=True)
    (code / ".git" / "info" / "attributes").write_text("* diff=evil filter=evil\n")


def _ran(witness: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(witness.rglob("ran-*"))}


def test_nothing_planted_in_the_agents_git_runs_and_no_credential_reaches_git(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", GOOGLE)
    repo = scratch_repo(tmp_path / "repo")
    code, changes = identify(repo)
    clone = tmp_path / "workspace" / "code"
    clone_code(repo, code, changes, clone)
    witness = tmp_path / "witness"
    witness.mkdir()
    _plant(clone, witness)
    (clone / "train.yaml").write_text((clone / "train.yaml").read_text().replace(
        "max_requests: 8", "max_requests: null"))  # the agent's fix

    patch = changes_since(repo, code.commit, changes, clone)
    check_patch(repo, code.commit, changes, patch)
    assert b"+        max_requests: null" in patch and b"hooks" not in patch
    assert _ran(witness) == {}, "a planted program ran"

    # The plants are live: git as the code ran it before (the user's environment, in the
    # clone) runs them and hands them the user's token.
    subprocess.run(["git", "-C", str(clone), "add", "--all"], capture_output=True, check=False)
    leaked = _ran(witness)
    assert {"ran-fsmonitor", "ran-clean", "ran-post-index-change"} <= set(leaked), leaked
    assert GH_TOKEN in leaked["ran-fsmonitor"] and GOOGLE in leaked["ran-fsmonitor"]


def test_the_base_is_rebuilt_from_the_user_repository_not_the_agents_objects(
        tmp_path: Path) -> None:
    """An agent that rewrites its clone's HEAD or base commit changes nothing gkr proposes:
    the fix is the work tree against the run's own commit and changes."""
    repo = scratch_repo(tmp_path / "repo")
    code, changes = identify(repo)
    clone = tmp_path / "code"
    clone_code(repo, code, changes, clone)
    (clone / "train.yaml").write_text("everything replaced\n")
    subprocess.run(["git", "-C", str(clone), "commit", "-qam", "hide it", "--no-verify"],
                   check=True, env={**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL":
                                    "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"})
    patch = changes_since(repo, code.commit, changes, clone)
    assert b"+everything replaced" in patch and b"-# tried locally" in patch


# --- a bundle with a diagnosis --------------------------------------------------------------

def _diagnosed(tmp_path: Path, root_cause: str = "the teacher's budget ran out",
               patch_extra: bytes = b"") -> tuple[Path, Bundle, bytes]:
    """A repository, its run's bundle, and an answer with a real patch; the patch."""
    repo = scratch_repo(tmp_path / "repo")
    config = config_for(tmp_path / "bundles")
    uri = write_bundle(Crash(config, RUN, driver_error(), Launch(str(repo / "train.yaml"),
                                                                 cwd=str(repo))))
    assert uri is not None
    bundle = open_bundle(uri)
    code, changes = identify(repo)
    clone = tmp_path / "code"
    clone_code(repo, code, changes, clone)
    text = (clone / "train.yaml").read_text().replace("max_requests: 8", "max_requests: null")
    (clone / "train.yaml").write_bytes(text.encode() + patch_extra)
    patch = changes_since(repo, code.commit, changes, clone)
    report = {"run": RUN, "root_cause": root_cause, "category": "config",
              "evidence": [{"claim": "rank 0 was refused", "source": "bundle/ranks/rank-0.json",
                            "excerpt": "budget spent"}], "patch": "patch.diff"}
    answer = bundle.folder.child(DIAGNOSIS)
    answer.write("report.json", json.dumps(report).encode())
    answer.write("patch.diff", patch)
    return repo, bundle, patch


def _branches(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "branch", "--list"], capture_output=True,
                          text=True, check=True).stdout


def test_an_approval_applies_the_reviewed_proposal_and_records_its_digest(
        tmp_path: Path) -> None:
    repo, bundle, _ = _diagnosed(tmp_path)
    digest = load_proposal(bundle).digest
    done = flow.approve(bundle, [repo], None, False, None, lambda _: None, digest)
    assert done.branch == f"gkr/diagnose-{RUN}" and done.branch in _branches(repo)
    decision = json.loads(bundle.folder.read(f"{DIAGNOSIS}/decision.json"))
    assert decision["digest"] == digest


def test_a_patch_swapped_after_review_is_refused_and_nothing_is_applied(
        tmp_path: Path) -> None:
    repo, bundle, patch = _diagnosed(tmp_path)
    reviewed = load_proposal(bundle).digest
    swapped = patch.replace(b"max_requests: null", b"max_requests: 99")
    bundle.folder.child(DIAGNOSIS).write("patch.diff", swapped)
    with pytest.raises(ProposalChanged, match=r"not the one reviewed .* nothing was applied"):
        flow.approve(bundle, [repo], None, False, None, lambda _: None, reviewed)
    assert "gkr/diagnose" not in _branches(repo)
    assert not bundle.folder.exists(f"{DIAGNOSIS}/decision.json")


@pytest.mark.parametrize("tamper", ["changed", "removed", "unrecorded"])
def test_the_runs_changes_must_have_the_digest_its_manifest_recorded(
        tmp_path: Path, tamper: str) -> None:
    repo, bundle, _ = _diagnosed(tmp_path)
    folder, name = bundle.folder, "code/changes.patch"
    if tamper == "changed":
        folder.write(name, folder.read(name).replace(b"tried locally", b"tried, then more"))
    elif tamper == "removed":
        folder.fs.rm(folder.path(name))
    else:
        manifest = dict(bundle.manifest)
        manifest["code"] = {**manifest["code"], "changes_sha256": "", "changes_bytes": 0}
        bundle = Bundle(bundle.uri, manifest)
    why = {"changed": "its sha256 is .*, not the", "removed": "is missing, yet",
           "unrecorded": "records no uncommitted changes"}[tamper]
    with pytest.raises(ChangesNotRecorded, match=why):
        load_proposal(bundle)
    assert "gkr/diagnose" not in _branches(repo)


# --- agent text on the terminal ------------------------------------------------------------

HIDE = b"\nevil: true  \x1b[2K\r# harmless comment"  # on screen only the comment shows


def test_show_prints_the_whole_patch_with_hidden_characters_escaped(tmp_path: Path) -> None:
    _, bundle, _ = _diagnosed(tmp_path, root_cause="budget \u202eesrever\u202c\x1b]8;;x\x07",
                              patch_extra=HIDE)
    shown = gkr_here("diagnose", "show", RUN, "--bundle", bundle.uri)
    assert shown.code == 0, shown.err
    assert "+evil: true  \\x1b[2K\\x0d# harmless comment" in shown.out
    assert "budget \\u202eesrever\\u202c\\x1b]8;;x\\x07" in shown.out
    assert not {"\x1b", "\r", "\x07", "\u202e"} & set(shown.out)
    assert "2 control or invisible character(s)" in shown.out
    assert f"--digest {load_proposal(bundle).digest}" in shown.out


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_show_as_data_escapes_hidden_characters_too(tmp_path: Path, output: str) -> None:
    _, bundle, _ = _diagnosed(tmp_path, root_cause="budget \u202eesrever\u202c",
                              patch_extra=HIDE)
    shown = gkr_here("diagnose", "show", RUN, "--bundle", bundle.uri, "-o", output)
    assert shown.code == 0, shown.err
    assert not {"\x1b", "\r", "\u202e", "\u202c"} & set(shown.out)
    data = yaml.safe_load(shown.out)  # JSON is YAML: the escapes still read back exactly
    assert data[0]["report"]["root_cause"].startswith("budget \u202eesrever\u202c")
    assert "\x1b[2K\r# harmless comment" in data[0]["patch"]


def test_approve_shows_the_whole_proposal_then_applies_only_what_it_showed(
        tmp_path: Path) -> None:
    _, bundle, patch = _diagnosed(tmp_path, patch_extra=HIDE)
    asked = gkr_here("diagnose", "approve", RUN, "--bundle", bundle.uri, "--no-relaunch",
                     stdin="n\n")
    assert asked.code == 130
    assert "+        max_requests: null" in asked.out and "\\x1b[2K\\x0d" in asked.out
    reviewed = load_proposal(bundle).digest
    bundle.folder.child(DIAGNOSIS).write("patch.diff", patch.replace(b"# harmless", b"# other"))
    refused = gkr_here("diagnose", "approve", RUN, "--bundle", bundle.uri, "--no-relaunch",
                       "--yes", "--digest", reviewed)
    assert refused.code == 5 and "is not the one reviewed" in refused.err
    assert "nothing was applied" in refused.err


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=60))
def test_visible_text_holds_no_control_or_bidi_character(text: str) -> None:
    shown = visible(text)
    for char in shown:
        point = ord(char)
        assert char in "\n\t" or not (point < 0x20 or 0x7f <= point <= 0x9f), repr(shown)
        assert not (0x202a <= point <= 0x202e or 0x2066 <= point <= 0x2069), repr(shown)
    if shown == text:
        assert visible(shown) == text


# --- downloads stay in their folder --------------------------------------------------------

def _memory_bundle(names: dict[str, bytes], tag: str) -> Folder:
    """A bundle on fsspec's in-memory filesystem, which keeps any object name (as GCS does,
    `..` and empty components included)."""
    folder = Folder(f"memory://hostile-{tag}")
    for name, data in names.items():
        folder.fs.pipe_file(f"{folder.root}/{name}", data)
    return folder


@pytest.mark.parametrize("name", ["a/../../escape.txt", "../escape.txt", "/abs.txt",
                                  "a//b.txt", "./x.txt", "logs/\x1b[2Kx.err"])
def test_a_hostile_object_name_is_refused_before_anything_is_written(
        tmp_path: Path, name: str) -> None:
    folder = _memory_bundle({"bundle.json": b"{}", name: b"planted"}, str(abs(hash(name))))
    target = tmp_path / "deep" / "target"
    with pytest.raises(BundleError, match="is refused"):
        folder.download(target)
    assert not any(path.is_file() for path in tmp_path.rglob("*"))


PART = st.text(alphabet=st.sampled_from(["a", "Z", "0", ".", "/", "-", "é", "\u202e", "\\"]),
               min_size=0, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(PART, min_size=1, max_size=4).map("/".join))
def test_any_name_is_refused_or_lands_inside_the_target(tmp_path_factory: pytest.TempPathFactory,
                                                      name: str) -> None:
    base = tmp_path_factory.mktemp("names")
    target = base / "target"
    target.mkdir()
    try:
        check_name(name, "test")
    except BundleError:
        assert name == "" or name.startswith("/") or set(name.split("/")) & {"", ".", ".."}
        return
    write_below(target, name, b"x")
    written = [path for path in base.rglob("*") if path.is_file()]
    assert len(written) == 1 and written[0].resolve().is_relative_to(target.resolve())


def test_links_in_the_target_are_refused_and_nothing_outside_is_written(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bundle.json").write_text("mine")
    folder = _memory_bundle({"bundle.json": b"{}", "logs/rank-0.err": b"log"}, "links")
    target = tmp_path / "target"
    target.mkdir()
    (target / "logs").symlink_to(outside, target_is_directory=True)
    with pytest.raises(BundleError, match="logs is refused: a symbolic link"):
        folder.download(target)
    assert list(target.iterdir()) == [target / "logs"]  # checked before anything is written
    (target / "logs").unlink()
    (target / "bundle.json").symlink_to(outside / "bundle.json")
    with pytest.raises(BundleError, match=re.escape("bundle.json is refused: a symbolic link")):
        folder.download(target)
    (target / "bundle.json").unlink()
    write_below(target, "logs/rank-0.err", b"old")
    with pytest.raises(BundleError, match=re.escape("logs/rank-0.err is refused: a symbolic link")):
        (target / "logs" / "rank-0.err").unlink()
        (target / "logs" / "rank-0.err").symlink_to(outside / "bundle.json")
        write_below(target, "logs/rank-0.err", b"through the link")  # the check at write
    (target / "logs" / "rank-0.err").unlink()
    os.link(outside / "bundle.json", target / "bundle.json")  # a hard link: replaced
    assert folder.download(target) == ["bundle.json", "logs/rank-0.err"]
    assert (outside / "bundle.json").read_text() == "mine"
    assert (target / "bundle.json").read_bytes() == b"{}"
    assert sorted(p.name for p in outside.iterdir()) == ["bundle.json"]


def test_a_link_in_a_local_bundle_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE")
    bundle = tmp_path / "bundle"
    (bundle / "ranks").mkdir(parents=True)
    (bundle / "bundle.json").write_text("{}")
    (bundle / "ranks" / "rank-0.json").symlink_to(secret)
    with pytest.raises(BundleError, match=re.escape("rank-0.json is refused: a symbolic link")):
        Folder(str(bundle)).download(tmp_path / "copy")
    assert not any("PRIVATE" in p.read_text() for p in (tmp_path / "copy").rglob("*")
                   if p.is_file())


def test_an_agents_answer_that_is_a_link_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE")
    layout = Layout(tmp_path / "ws").make()
    (layout.out / "report.json").write_text(json.dumps({
        "run": RUN, "root_cause": "x", "category": "config", "patch": "patch.diff",
        "evidence": [{"claim": "c", "source": "s"}]}))
    (layout.out / "patch.diff").symlink_to(secret)
    with pytest.raises(BundleError, match=re.escape("patch.diff is refused: a symbolic link")):
        read_answer(layout, AgentRun(0, layout.root / "agent.log"), RUN)


# --- no secrets in a bundle -----------------------------------------------------------------

PLANTED = {
    "hf": "hf_" + "Qw3rTy" * 6, "github": GH_TOKEN, "pat": "github_pat_" + "11AB" * 8,
    "google": "ya29.a0AfH6SMB" + "xYz" * 8, "aws": "AKIA" + "QWERTYUIOP123456",
    "slack": "xoxb-1234567890-" + "abcd" * 5, "password": "hunter2-but-longer",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.c2lnbmF0dXJlLXBsYW50ZWQ",
    "pem": "MIIEpAIBAAKCAQEAplanted",
}


def test_a_planted_token_leaves_no_trace_in_the_bundle(tmp_path: Path) -> None:
    repo = scratch_repo(tmp_path / "repo")
    (repo / ".env").write_text(f"HF_TOKEN={PLANTED['hf']}\ndb_password = "
                               f"{PLANTED['password']}\nPLAIN=kept\n")
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(f"env:\n- name: SLACK_TOKEN\n  value: {PLANTED['slack']}\n"
                        f"- name: AWS_ACCESS_KEY_ID\n  value: {PLANTED['aws']}\n")
    config = config_for(tmp_path / "bundles")
    with pytest.raises(RuntimeFailure), rank_failures(config, RUN, rank=0):
        logging.getLogger("runtime.train.loop").warning(
            "auth with %s then %s; jwt %s; key -----BEGIN PRIVATE KEY-----\n%s\n"
            "-----END PRIVATE KEY-----", PLANTED["github"], PLANTED["google"], PLANTED["jwt"],
            PLANTED["pem"])
        raise RuntimeFailure(f"teacher refused GH_TOKEN={PLANTED['github']}")
    error = driver_error()
    error.args = (f"{error.args[0]} (token {PLANTED['pat']})",)
    uri = write_bundle(Crash(config, RUN, error, Launch(str(repo / "train.yaml"),
                                                        manifest=str(manifest), cwd=str(repo))))
    assert uri is not None
    stored = {path: path.read_bytes() for path in Path(uri).rglob("*") if path.is_file()}
    assert Path(uri, "job/manifest.yaml") in stored
    assert stored[Path(uri, "ranks/rank-0.json")].count(b"[REDACTED]") >= 5  # log and error
    for what, token in PLANTED.items():
        leaks = [str(path) for path, data in stored.items() if token.encode() in data]
        assert not leaks, f"{what} token in {leaks}"
    bundle = open_bundle(uri)
    patch = bundle.folder.read("code/changes.patch")
    assert b"+HF_TOKEN=[REDACTED]" in patch and b"+PLAIN=kept" in patch
    assert bundle.manifest["code"]["changes_sha256"] == hashlib.sha256(patch).hexdigest()
    assert {"code/changes.patch", "job/manifest.yaml"} <= set(bundle.manifest["redacted"])
    assert load_proposal_changes(bundle) == patch  # the digest the approval checks holds


def load_proposal_changes(bundle: Bundle) -> bytes:
    from generator.diagnose.review import verified_changes

    return verified_changes(bundle, bundle.folder.read("code/changes.patch"), "test")


@pytest.mark.parametrize("text", [
    f"export GITHUB_TOKEN={PLANTED['github']}", f"token={PLANTED['pat']}",
    f"Authorization: Bearer {PLANTED['google']}", f"id {PLANTED['aws']} used",
    f"-----BEGIN RSA PRIVATE KEY-----\n{PLANTED['pem']}\n-----END RSA PRIVATE KEY-----",
    f"hook {PLANTED['slack']}", f"cookie={PLANTED['jwt']}", f"HF {PLANTED['hf']}",
    f'{{"DB_PASSWORD": "{PLANTED["password"]}"}}',
])
def test_each_token_shape_is_redacted(text: str) -> None:
    done = redact(text.encode(), "logs/rank-0.err")
    assert done.count >= 1 and not any(t.encode() in done.data for t in PLANTED.values())
    assert redact(done.data, "logs/rank-0.err") == type(done)(done.data, 0)  # idempotent


def test_code_that_names_a_secret_is_left_intact() -> None:
    code = b'+API_KEY = os.environ["API_KEY"]\n+MAX_KEY = 5\n+sort_key = lambda x: x\n'
    assert redact(b"diff --git a/x.py b/x.py\n" + code, "code/changes.patch").count == 0


SHAPED = [PLANTED[name] for name in ("hf", "github", "pat", "google", "aws", "slack", "jwt")]
AROUND = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                 max_size=40)


@settings(max_examples=200, deadline=None)
@given(AROUND, st.sampled_from(SHAPED), AROUND, st.sampled_from(["logs/rank-0.err", ".env",
                                                                "ranks/rank-0.json"]))
def test_a_token_in_any_surrounding_text_is_redacted(before: str, token: str, after: str,
                                                     name: str) -> None:
    text = f"{before} {token}\n{after}".encode()
    assert token.encode() not in redact(text, name).data
