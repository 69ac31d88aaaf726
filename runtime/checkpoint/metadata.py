"""DCP's `.metadata` read without running code: an unpickler that admits only metadata types.

torch's FileSystemReader.read_metadata (torch 2.13, torch/distributed/checkpoint/filesystem.py)
calls `pickle.load` on the file, so a planted `.metadata` whose `__reduce__` names `os.system`
runs in every rank that resumes. The readers here load it with a `pickle.Unpickler` whose
`find_class` admits only the globals a DCP metadata pickle names (the stdlib's documented way
to restrict globals: https://docs.python.org/3/library/pickle.html#restricting-globals).

torch's own weights_only unpickler (torch._weights_only_unpickler, with
torch.serialization.add_safe_globals) does not fit: it refuses the FRAME opcode of pickle
protocol 4, in which DCP writes `.metadata` ("Unsupported operand 149").
"""

from __future__ import annotations

import os
import pathlib
import pickle
from collections import OrderedDict
from typing import IO, Any, cast

import torch
import torch.serialization
from torch.distributed.checkpoint import filesystem, metadata
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from runtime.checkpoint.storage import CheckpointError

# Every global that torch 2.13's DCP writes into `.metadata` (metadata.py and filesystem.py:
# the dataclasses, the memory-format enum TensorProperties pickles, torch.Size of offsets and
# sizes, layouts through torch.serialization._get_layout, and the writer's checkpoint path).
# Calling any of them builds a value; none reads or writes anything or runs other code.
_ALLOWED: dict[tuple[str, str], Any] = {
    (obj.__module__, obj.__qualname__): obj
    for obj in (
        metadata.Metadata,
        metadata.TensorStorageMetadata,
        metadata.BytesStorageMetadata,
        metadata.ChunkStorageMetadata,
        metadata.TensorProperties,
        metadata.MetadataIndex,
        metadata.StorageMeta,
        metadata._MEM_FORMAT_ENCODING,
        filesystem._StorageInfo,
        torch.serialization._get_layout,
        pathlib.PosixPath,
        pathlib.PurePosixPath,
        OrderedDict,
    )
}
_ALLOWED[("torch", "Size")] = torch.Size
# dtypes pickle as the attribute of `torch` that names them (torch.float32, torch.bfloat16).
_ALLOWED.update(
    {("torch", name): value for name, value in vars(torch).items()
     if isinstance(value, torch.dtype)}
)
# The Python classes among them: a pickle could set their attributes (BUILD on the class
# itself); that is refused after loading, with the classes restored.
_MUTABLE = [obj for obj in _ALLOWED.values()
            if isinstance(obj, type) and obj.__module__.startswith(("torch.", "pathlib"))]
_ALLOWED_TEXT = ("torch.distributed.checkpoint metadata types, torch.Size, torch dtypes and "
                 "layouts, pathlib paths and collections.OrderedDict")
# What a corrupt or hostile pickle raises while being loaded by the C unpickler.
_LOAD_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError,
                AttributeError, IndexError, RuntimeError, RecursionError, MemoryError,
                OverflowError)  # a FRAME length beyond sys.maxsize (found by hypothesis)


class CheckpointMetadataError(CheckpointError):
    """A checkpoint's `.metadata` names a type outside DCP's metadata, or is not metadata."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"checkpoint metadata {path}: {reason}; nothing in it was used")


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only the allow-listed globals; everything else is refused before it exists."""

    def __init__(self, file: IO[bytes], path: str) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise CheckpointMetadataError(
                self.path, f"refuses the global {module}.{name} (only {_ALLOWED_TEXT} are allowed)"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise CheckpointMetadataError(self.path, "refuses a persistent id (DCP writes none)")


def _snapshot() -> list[dict[str, Any]]:
    return [dict(vars(cls)) for cls in _MUTABLE]


def _restore(before: list[dict[str, Any]]) -> bool:
    """Undo attribute changes to the allowed classes; whether there were any."""
    changed = False
    for cls, old in zip(_MUTABLE, before, strict=True):
        now = vars(cls)
        for key in [k for k in now if k not in old or now[k] is not old[k]]:
            changed = True
            if key in old:
                setattr(cls, key, old[key])
            else:
                delattr(cls, key)
    return changed


def load_metadata(stream: IO[bytes], path: str) -> Metadata:
    """The Metadata pickled in `stream` (read from `path`), or CheckpointMetadataError."""
    before = _snapshot()
    try:
        loaded = _MetadataUnpickler(stream, path).load()
    except CheckpointMetadataError:
        raise
    except _LOAD_ERRORS as error:
        raise CheckpointMetadataError(
            path, f"is not a readable DCP metadata pickle ({type(error).__name__}: {error})"
        ) from None
    finally:
        tampered = _restore(before)
    if tampered:
        raise CheckpointMetadataError(path, "changes attributes of the metadata classes")
    return _checked(loaded, path)


def _checked(loaded: object, path: str) -> Metadata:
    """The shape DCP's loader indexes without checking (planner and storage data by key)."""
    if not isinstance(loaded, Metadata):
        raise CheckpointMetadataError(
            path, f"holds a {type(loaded).__name__}, not torch.distributed.checkpoint Metadata"
        )
    for field in ("state_dict_metadata", "storage_data"):
        if not isinstance(getattr(loaded, field, None), dict):
            raise CheckpointMetadataError(path, f"Metadata.{field} is not a dict")
    if not isinstance(getattr(loaded, "storage_meta", None), StorageMeta | None):
        raise CheckpointMetadataError(path, "Metadata.storage_meta is not a StorageMeta")
    return loaded


def _read(reader: FileSystemReader, rank: int | None) -> Metadata:
    """FileSystemReader.read_metadata (torch 2.13) with the restricted unpickler."""
    path = reader._get_metadata_path(rank)
    try:
        with reader.fs.create_stream(path, "rb") as stream:
            # create_stream is typed io.IOBase; opened "rb", it is a binary stream.
            found = load_metadata(cast(IO[bytes], stream), str(path))
    except OSError as error:
        raise CheckpointMetadataError(str(path), f"cannot be read: {error}") from None
    if found.storage_meta is None:
        found.storage_meta = StorageMeta()
    found.storage_meta.load_id = reader.load_id
    return found


class SafeFileSystemReader(FileSystemReader):
    """DCP's local reader; `.metadata` through the restricted unpickler, read once.

    Checkpointer.load reads it before DCP's load, so that a refusal reaches the caller as
    itself: inside DCP, state_dict_loader.local_step catches it, falls back to
    `__<rank>.metadata` and reports both in a CheckpointException.
    """

    def __init__(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self._metadata: dict[int | None, Metadata] = {}

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        rank = kwargs.get("rank")
        if rank not in self._metadata:
            self._metadata[rank] = _read(self, rank)
        return self._metadata[rank]

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        super().reset(checkpoint_id)
        self._metadata = {}


class SafeFsspecReader(FsspecReader, SafeFileSystemReader):
    """DCP's fsspec reader (gs:// and other URLs) with SafeFileSystemReader's metadata read
    (FsspecReader only swaps the filesystem and path; the MRO puts the safe read under it)."""


def reader_for(uri: str) -> SafeFileSystemReader:
    """The reader for a checkpoint URI: fsspec for URLs, the local reader for paths."""
    return SafeFsspecReader(uri) if "://" in uri else SafeFileSystemReader(uri)
