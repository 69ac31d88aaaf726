"""Switching a set of files all or nothing, the way a database commits a transaction.

Every new file is first staged under `.gkr/staging/`, outside the output folders. Renaming
the journal into place is the commit point; then the staged files are renamed over their
targets and stale files are removed. A process killed before the commit point leaves the
old tree (and a staging folder that the next run discards); killed after it, it leaves a
journal that the next run replays to the end. Replaying is idempotent: a staged file that
is gone has been moved already. Callers hold `generator.lock.tree_lock`.

Nothing is fsynced: like git's default, the guarantee covers a killed process (SIGKILL, the
OOM killer, Ctrl-C), not a power loss.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path, PurePosixPath

from generator.errors import BadRequest

STAGING = ".gkr/staging"
JOURNAL = "journal.json"
FILES = "files"


class TreeNotWritable(BadRequest):
    """The rendered tree cannot be written as it stands; the message names each path."""


def commit(root: Path, writes: dict[str, bytes], removes: list[str]) -> None:
    """Replace the files `writes` names and remove `removes`, all or nothing."""
    staging = root / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    try:
        names = _stage(staging / FILES, writes)
        _write_journal(staging, names, removes)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise TreeNotWritable(f"cannot stage the rendered tree in {STAGING}: {_why(error)}; "
                              "nothing was changed") from None
    _finish(root, staging)


def recover(root: Path) -> bool:
    """Finish a switch that a killed run committed, or discard one it had not; True when
    an interrupted switch was finished."""
    staging = root / STAGING
    if (staging / JOURNAL).is_file():
        _finish(root, staging)
        return True
    if staging.exists():
        shutil.rmtree(staging, ignore_errors=True)
    return False


def _stage(folder: Path, writes: dict[str, bytes]) -> list[tuple[str, str]]:
    """Write each new file under a numbered name; new files get the umask's mode."""
    folder.mkdir(parents=True)
    names = []
    for index, (path, data) in enumerate(writes.items()):
        (folder / str(index)).write_bytes(data)
        names.append((path, str(index)))
    return names


def _write_journal(staging: Path, names: list[tuple[str, str]], removes: list[str]) -> None:
    pending = staging / f"{JOURNAL}.new"
    pending.write_text(json.dumps({"writes": names, "removes": removes}), encoding="utf-8")
    os.replace(pending, staging / JOURNAL)  # the commit point


def _finish(root: Path, staging: Path) -> None:
    writes, removes = _read_journal(staging)
    try:
        for path, name in writes:
            source = staging / FILES / name
            if source.exists():
                _move(source, root / path)
        for path in removes:
            (root / path).unlink(missing_ok=True)
            _prune_empty(root / path, root)
    except OSError as error:
        raise TreeNotWritable(
            f"could not finish writing the rendered tree: {_why(error)}. Fix that and run "
            f"`gkr render` again: it completes this write (the new files wait in {STAGING})"
        ) from None
    (staging / JOURNAL).unlink()
    shutil.rmtree(staging, ignore_errors=True)


def _read_journal(staging: Path) -> tuple[list[tuple[str, str]], list[str]]:
    try:
        data = json.loads((staging / JOURNAL).read_text(encoding="utf-8"))
        writes = [(str(path), str(name)) for path, name in data["writes"]]
        removes = [str(path) for path in data["removes"]]
    except (OSError, ValueError, KeyError, TypeError):
        raise TreeNotWritable(f"{STAGING}/{JOURNAL} is unreadable; remove {STAGING} and run "
                              "`gkr render` again") from None
    if not all(_inside(path) for path in [p for p, _ in writes] + removes):
        raise TreeNotWritable(f"{STAGING}/{JOURNAL} names paths outside the repository; "
                              f"remove {STAGING} and run `gkr render` again")
    return writes, removes


def _inside(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not PurePosixPath(path).is_absolute() and ".." not in parts


def _move(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        # .gkr/ is on another filesystem: copy beside the target, so the switch of each file
        # is still one rename (a replay after a kill overwrites the same copy).
        beside = target.with_name(f".{target.name}.gkr-new")
        shutil.copyfile(source, beside)
        os.replace(beside, target)
        source.unlink()


def _prune_empty(path: Path, root: Path) -> None:
    folder = path.parent
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def _why(error: OSError) -> str:
    return f"{error.filename}: {error.strerror}" if error.filename else str(error)
