"""Messages name flags that exist: every problem in a value given on the command line names
the option (or argument) of `gkr submit` it came from, and the owner never comes silently
from `git config user.email`."""

from __future__ import annotations

import re

import pytest
import typer

from tests.cli.conftest import SUBMIT, app, gkr


def _spellings(command: str) -> set[str]:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    names = {opt for param in click_command.params for opt in param.opts
             if opt.startswith("-")}
    return names | {p.name.upper() for p in click_command.params if not p.opts[0].startswith("-")}


def _without(args: list[str], flag: str) -> list[str]:
    at = args.index(flag)
    return args[:at] + args[at + 2:]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    return [*(_without(args, flag) if flag in args else args), flag, value]


@pytest.mark.parametrize(("flag", "value", "named"), [
    ("--accelerator", "B200", "--accelerator"),
    ("--accelerators", "B200", "--accelerator"),  # the alias kubectl-ray users type
    ("--image", "ubuntu:latest", "--image"),
    ("--docker-image", "ubuntu:latest", "--image"),
    ("--owner", "not-an-email", "--owner"),
    ("--pods", "0", "--pods"),
    ("--memory", "lots", "--memory"),
    ("--cluster", "nowhere", "--cluster"),
])
def test_a_bad_value_names_a_flag_that_exists(repo, flag, value, named) -> None:
    args = [a if a != "--accelerator" or flag != "--accelerators" else flag for a in SUBMIT]
    if flag == "--docker-image":
        args = _without(args, "--image")
    shown = gkr(*_with(args, flag, value), "--dry-run")
    assert shown.code == 1, shown.err
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|NAME|KIND)\b", shown.err))
    assert named in flags, shown.err
    assert flags <= _spellings("submit"), shown.err


def test_a_bad_name_points_at_the_argument(repo) -> None:
    shown = gkr("submit", "Bad_Name", *SUBMIT[2:], "--dry-run")
    assert shown.code == 1 and "NAME" in shown.err and "--name" not in shown.err


def test_the_owner_from_git_config_is_said(repo) -> None:
    shown = gkr(*_without(SUBMIT, "--owner"), "--dry-run")
    assert shown.code == 0, shown.err
    assert "owner: tester@reve.ai (from git config user.email" in shown.err
    assert "gkr.dev/owner: tester@reve.ai" in shown.out


def test_no_owner_anywhere_asks_for_the_flag(repo, tmp_path, monkeypatch) -> None:
    import git

    for variable in ("HOME", "XDG_CONFIG_HOME"):  # no user-wide git config either
        monkeypatch.setenv(variable, str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    with git.Repo(repo).config_writer() as config:
        config.remove_option("user", "email")
    shown = gkr(*_without(SUBMIT, "--owner"), "--dry-run", stdin="")
    assert shown.code == 1 and "--owner is needed" in shown.err
