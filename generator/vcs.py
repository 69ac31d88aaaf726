"""Git, imported only by the commands that use it: GitPython raises at import when no `git`
is on PATH, which must not break `gkr --help` or the commands that never touch git."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from generator.errors import ToolFailed


def load_git(purpose: str) -> ModuleType:
    """The `git` package (GitPython); ToolFailed saying what needed it when git is missing."""
    try:
        import git
    except ImportError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "not importable"
        raise ToolFailed(f"{purpose} needs git, and git is not usable: {reason}. Install git "
                         "or put it on PATH") from None
    return git


def git_email(root: Path) -> str | None:
    """`git config user.email` of the repository at `root` (None when unset or no git)."""
    try:
        git = load_git("the default --owner")
        reader = git.Repo(root, search_parent_directories=True).config_reader()
        return str(reader.get_value("user", "email")) or None
    except Exception:  # no git, no repository, no user.email, unreadable config: no default
        return None
