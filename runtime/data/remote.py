"""Local copies of remote inputs (gs://, any fsspec URL): memory maps, line indexes and
tokenizer files need a local file. Copies live under $GKR_DATA_CACHE (default
~/.cache/gkr/tokens), one per version of the remote object."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from runtime.errors import Category, RuntimeFailure


class RemoteInputError(RuntimeFailure):
    """A remote input is missing or unreadable."""

    category = Category.INVALID_INPUT


def cache_root() -> Path:
    """Where remote inputs are copied: $GKR_DATA_CACHE, else ~/.cache/gkr/tokens."""
    return Path(os.environ.get("GKR_DATA_CACHE") or Path.home() / ".cache" / "gkr" / "tokens")


def is_remote(path: str | Path) -> bool:
    return "://" in str(path)


def fetch_file(url: str, cache: Path | None = None) -> Path:
    """A local copy of one remote file, made once per version (its size and etag, or its
    modification time) and renamed into place whole, so a reader never sees half of it."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    try:
        info = fs.info(path)
    except OSError as exc:  # FileNotFoundError included
        raise RemoteInputError(f"{url}: cannot read it ({exc})") from None
    stamp = info.get("etag") or info.get("mtime") or info.get("updated") or ""
    version = hashlib.sha256(json.dumps([url, info.get("size"), str(stamp)]).encode())
    local = (cache or cache_root()) / "files" / version.hexdigest()[:16] / Path(path).name
    if not local.exists():
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(f".{local.name}.{os.getpid()}.part")
        fs.get_file(path, str(part))
        os.replace(part, local)  # racing copies are the same bytes: the last one stays
    return local
