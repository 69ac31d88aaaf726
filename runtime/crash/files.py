"""A bundle's folder on any fsspec filesystem: a local path, or a URL such as gs://.

The same filesystems and URLs as the checkpoints (runtime.checkpoint.storage): fsspec's
`url_to_fs` resolves either, so a run that can checkpoint somewhere can leave its bundle there.

A download never leaves its folder: an object name is a relative path of plain components
(GCS allows any bytes in a name, `..` and a leading `/` included: cloud.google.com/storage/
docs/objects#naming), and every file is reached from the folder one component at a time with
`O_NOFOLLOW` (open(2)), so a symbolic link, in the target or in a local bundle, is refused
rather than followed; each file is written under a fresh name and renamed into place, so a
hard link in the target is replaced, never written through, and no file is left half-written.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import fsspec
from fsspec.core import url_to_fs

from runtime.errors import Category, RuntimeFailure

MANIFEST = "bundle.json"  # written last: a bundle is complete once it exists
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted in place of a file must not hang the open (open(2)).
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class BundleError(RuntimeFailure):
    """A bundle cannot be found, read or written."""

    category = Category.INVALID_INPUT


class Folder:
    """Files under one root URI; names are relative, `/`-separated."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/") or "/"
        self.fs: fsspec.AbstractFileSystem
        try:
            self.fs, self.root = url_to_fs(self.uri)
        except (ImportError, ValueError) as error:  # a scheme whose package is missing
            raise BundleError(f"cannot open {self.uri}: {error}") from None
        self.root = self.root.rstrip("/")

    def child(self, name: str) -> Folder:
        return Folder(f"{self.uri}/{name}")

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def write(self, name: str, data: bytes) -> None:
        """Write one file, making its folders."""
        path = self.path(name)
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)

    def read(self, name: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self.path(name)))
        except (OSError, ValueError) as error:
            raise BundleError(f"cannot read {self.uri}/{name}: {error}") from None

    def exists(self, name: str = "") -> bool:
        return bool(self.fs.exists(self.path(name) if name else self.root))

    def names(self) -> list[str]:
        """Every file below the root, relative to it, sorted."""
        return sorted(self.sizes())

    def sizes(self) -> dict[str, int]:
        """Every file below the root and its size. Listed afresh: other processes (the
        ranks) write here too, and remote filesystems cache listings."""
        self.fs.invalidate_cache(self.root)
        if not self.fs.exists(self.root):
            return {}
        found = self.fs.find(self.root, detail=True)
        prefix = self.root + "/"
        return {str(path).removeprefix(prefix): int(info.get("size") or 0)
                for path, info in found.items() if str(path).startswith(prefix)}

    def folders(self) -> list[str]:
        """The names of the folders right below the root."""
        if not self.fs.exists(self.root):
            return []
        return sorted(str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]
                      for entry in self.fs.ls(self.root, detail=True)
                      if entry.get("type") == "directory")

    def download(self, target: Path, skip: str | None = None) -> list[str]:
        """Copy every file to `target` (a local folder), but those under `skip`; the names
        copied. Every name is checked before anything is written."""
        names = [name for name in self.names() if not (skip and name.startswith(skip))]
        for name in names:
            _refuse_links_on_the_way(target, check_name(name, self.uri), name)
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            write_below(target, name, self._read_plain(name))
        return names

    def _read_plain(self, name: str) -> bytes:
        """A file's bytes; on a local filesystem without following a link on the way."""
        if "file" in _protocols(self.fs):
            return read_below(Path(self.root), name)
        return self.read(name)


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


# --- files below a folder, links not followed -----------------------------------------------

def check_name(name: str, where: str) -> list[str]:
    """The components of a relative object name; BundleError naming the object and why when
    it could leave its folder or fool a terminal."""
    why = _name_problem(name)
    if why:
        raise BundleError(f"{where}: object {name!r} is refused: {why}; a bundle's names are "
                          "relative paths of plain components below its folder")
    return name.split("/")


def _name_problem(name: str) -> str:
    if not name:
        return "the name is empty"
    if name.startswith("/"):
        return "it is absolute"
    if any(ord(char) < 0x20 or ord(char) == 0x7f for char in name):
        return "it holds a control character"
    parts = name.split("/")
    if ".." in parts:
        return "it climbs out with '..'"
    if "" in parts or "." in parts:
        return "it has an empty or '.' component"
    return ""


def _refuse_links_on_the_way(root: Path, parts: list[str], name: str) -> None:
    """BundleError if a link already stands where `name` would go below `root`: checked for
    every name before anything is written (writing checks again, with O_NOFOLLOW)."""
    path = root
    for index, part in enumerate(parts):
        path = path / part
        if path.is_symlink():
            where = "/".join(parts[:index + 1])
            raise BundleError(f"{root}/{where} is refused: a symbolic link (links are never "
                              f"followed; it stands where {name} would go)")
        if not path.exists():
            return


def write_below(root: Path, name: str, data: bytes) -> None:
    """Write `root`/`name` (folders made as needed) without following a link."""
    parts = check_name(name, str(root))
    folder = _folder_below(root, parts[:-1], make=True)
    try:
        _refuse_link(folder, parts[-1], root, name)
        fresh = f".{parts[-1]}.gkr-{os.getpid()}.part"
        try:
            handle = os.open(fresh, _CREATE, 0o644, dir_fd=folder)
        except FileExistsError:
            os.unlink(fresh, dir_fd=folder)
            handle = os.open(fresh, _CREATE, 0o644, dir_fd=folder)
        with os.fdopen(handle, "wb") as output:
            output.write(data)
        os.rename(fresh, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as error:
        raise BundleError(f"cannot write {root}/{name}: {error.strerror or error}") from None
    finally:
        os.close(folder)


def read_below(root: Path, name: str) -> bytes:
    """The bytes of the plain file `root`/`name`, reached without following a link."""
    parts = check_name(name, str(root))
    folder = _folder_below(root, parts[:-1], make=False)
    try:
        _refuse_link(folder, parts[-1], root, name)
        handle = os.open(parts[-1], _READ, dir_fd=folder)
    except OSError as error:
        raise BundleError(f"cannot read {root}/{name}: {error.strerror or error}") from None
    finally:
        os.close(folder)
    with os.fdopen(handle, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise BundleError(f"{root}/{name} is refused: not a plain file")
        return source.read()


def read_plain(path: Path) -> bytes:
    """A plain file's bytes, refused when `path` itself is a link (a file an agent wrote)."""
    return read_below(path.parent, path.name)


def _folder_below(root: Path, parts: list[str], make: bool) -> int:
    """A descriptor of `root`/`parts` (the root itself may be a link: the caller named it)."""
    try:
        handle = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise BundleError(f"cannot open {root}: {error.strerror or error}") from None
    for index, part in enumerate(parts):
        try:
            if make and not _exists(handle, part):
                os.mkdir(part, 0o755, dir_fd=handle)
            below = os.open(part, _DIRECTORY, dir_fd=handle)
        except OSError as error:
            os.close(handle)
            where = "/".join(parts[:index + 1])
            if error.errno in (errno.ELOOP, errno.ENOTDIR):
                raise BundleError(f"{root}/{where} is refused: a symbolic link or not a folder "
                                  "(links are never followed)") from None
            raise BundleError(f"cannot open {root}/{where}: {error.strerror or error}"
                              ) from None
        os.close(handle)
        handle = below
    return handle


def _exists(folder: int, part: str) -> bool:
    try:
        os.stat(part, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _refuse_link(folder: int, part: str, root: Path, name: str) -> None:
    try:
        mode = os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise BundleError(f"{root}/{name} is refused: a symbolic link (links are never "
                          "followed)")
