"""Working-directory packaging for `gkr submit --working-dir`: a deterministic zip of the files
git would track (`.gitignore` respected), uploaded to the cluster's code store, whose URI then
becomes the Ray runtime_env `working_dir`.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path
from typing import Protocol

import fsspec

from generator.errors import BadRequest, ToolFailed
from generator.vcs import load_git

# A fixed timestamp makes the archive depend only on names and contents (zip needs >= 1980).
EPOCH = (1980, 1, 1, 0, 0, 0)


class CodeStore(Protocol):
    """Where packaged working directories go; returns the URI the cluster reads."""

    def put(self, name: str, data: bytes) -> str: ...


class FsspecStore:
    """A store at a gs://, s3:// or file:// prefix through fsspec (gcsfs/s3fs for clouds)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.rstrip("/")

    def uri(self, name: str) -> str:
        """Where an object named `name` is (and what the cluster reads)."""
        return f"{self.prefix}/{name}"

    def put(self, name: str, data: bytes) -> str:
        uri = self.uri(name)
        try:
            with fsspec.open(uri, "wb", auto_mkdir=True) as handle:
                handle.write(data)
        except (ImportError, ValueError) as error:
            raise ToolFailed(f"cannot write to the code store {self.prefix}: {error}") from None
        except OSError as error:
            raise ToolFailed(f"upload to {uri} failed: {error}") from None
        return uri


def package_files(folder: Path) -> list[str]:
    """Files to ship: tracked and untracked-but-not-ignored files of a git checkout, else all."""
    git = load_git("--working-dir (its .gitignore decides what ships)")
    try:
        repo = git.Repo(folder, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    top = Path(repo.working_tree_dir or folder).resolve()
    listed = repo.git.ls_files("--cached", "--others", "--exclude-standard", "-z", "--",
                               str(folder.resolve()))
    prefix = folder.resolve().relative_to(top).as_posix()
    names = [n.removeprefix(f"{prefix}/") if prefix != "." else n for n in listed.split("\0")]
    return sorted(n for n in names if n and (folder / n).is_file())


def local_folder(value: str, roots: list[Path]) -> Path | None:
    """The local folder a --working-dir names, or None when no such folder is here (a path in
    the image). Only folders inside `roots` (the repository, the current directory) are
    shipped: an absolute path such as /etc that also exists on this machine is refused, not
    zipped."""
    folder = Path(value).expanduser()
    if not folder.is_dir():
        return None
    resolved = folder.resolve()
    if any(resolved.is_relative_to(root.resolve()) for root in roots):
        return resolved
    raise BadRequest(f"--working-dir {value}: a folder on this machine outside the repository "
                     "and the current directory; gkr ships only folders inside them (cd into "
                     "its parent first). For a path inside the image, set working_dir in the "
                     "spec file")


def _shipped(folder: Path, names: list[str]) -> list[str]:
    """Names whose files stay inside the folder: a symlink out of it is refused, never read."""
    top = folder.resolve()
    outside = [name for name in names if not (folder / name).resolve().is_relative_to(top)]
    if outside:
        raise BadRequest(f"--working-dir {folder}: {', '.join(outside[:5])} link out of the "
                         "folder; gkr does not ship files from outside it")
    return names


def build_zip(folder: Path) -> bytes:
    """The archive: sorted names, fixed timestamps, permissions kept (executables stay so)."""
    if not folder.is_dir():
        raise BadRequest(f"--working-dir {folder}: not a directory")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in _shipped(folder, package_files(folder)):
            info = zipfile.ZipInfo(name, EPOCH)
            info.external_attr = ((folder / name).stat().st_mode & 0o777 | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, (folder / name).read_bytes())
    return buffer.getvalue()


def archive(folder: Path, job: str) -> tuple[str, bytes]:
    """(object name, zip): the name holds the content hash, so re-submits reuse one object."""
    data = build_zip(folder)
    return f"{job}-{hashlib.sha256(data).hexdigest()[:16]}.zip", data
