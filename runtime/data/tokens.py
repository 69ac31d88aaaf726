"""Token shards: text tokenized once (`prepare`), read as fixed windows (`TokenWindows`).

A prepared folder holds `shard-NNNNN.bin` files, each a flat little-endian array of token
ids (uint16 when the vocabulary fits, else uint32; `np.memmap` reads them in place),
`meta.json` and, for a BPE, its `tokenizer.json`. Documents are read in a fixed order
(inputs as given, a folder's files sorted by path) and each is followed by the end-of-
document id. meta.json records the tokenizer (a component section), vocab_size, eos_id,
dtype, the document, token and source-byte counts, bytes_per_token (source bytes per token:
a loss in nats per token / ln 2 / bytes_per_token is bits per byte), every shard with its
token count and sha256, and `hash`, the sha256 of all of that: the same inputs and
tokenizer give the same hash on any machine.

A folder is written whole or not at all: into a temporary sibling, renamed at the end.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import secrets
import shutil
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.data.corpus import corpus_files
from runtime.data.jsonl import InputError, read_jsonl
from runtime.data.remote import cache_root
from runtime.data.tokenizer import (
    BPE_MIN_VOCAB,
    ByteTokenizer,
    Tokenizer,
    load_tokenizer,
    train_bpe,
)

META = "meta.json"
FORMAT = "gkr-tokens/1"
SHARD_TOKENS = 1 << 27  # ids per shard file: 256 MiB of uint16
_ENCODE_BATCH = 256  # documents per encode_batch call of a BPE


def input_files(inputs: Sequence[str | Path]) -> list[Path]:
    """Files in reading order: each input as given; a folder's files sorted by path, but
    for hidden ones and `__pycache__` (byte code beside the sources)."""
    files: list[Path] = []
    for given in map(Path, inputs):
        if given.is_dir():
            files.extend(sorted(p for p in given.rglob("*") if p.is_file() and not any(
                part.startswith(".") or part == "__pycache__"
                for part in p.relative_to(given).parts)))
        elif given.is_file():
            files.append(given)
        else:
            raise InputError(f"{given}: no such file or folder")
    if not files:
        raise InputError(f"no input files in {', '.join(map(str, inputs)) or 'no inputs'}")
    return files


def documents(files: Sequence[Path], field: str = "text") -> Iterator[str]:
    """Every document: a `.jsonl` file's lines (their `field`), any other file whole."""
    for path in files:
        if path.suffix == ".jsonl":
            yield from read_jsonl(path, field)
            continue
        try:
            yield path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{path}:{_line_of(path, exc.start)}: not UTF-8 text "
                             f"(byte {exc.start})") from None


def _line_of(path: Path, offset: int) -> int:
    with path.open("rb") as raw:
        return raw.read(offset).count(b"\n") + 1


def dtype_for(vocab_size: int) -> np.dtype[Any]:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


class _ShardWriter:
    """Appends token arrays to shard files of `limit` ids, hashing them as it goes."""

    def __init__(self, folder: Path, dtype: np.dtype[Any], limit: int) -> None:
        self.folder, self.dtype, self.limit = folder, dtype, limit
        self.shards: list[dict[str, Any]] = []
        self._pending: list[np.ndarray] = []
        self._count = 0

    def add(self, ids: np.ndarray) -> None:
        self._pending.append(ids.astype(self.dtype))
        self._count += len(ids)
        while self._count >= self.limit:
            flat = np.concatenate(self._pending)
            self._write(flat[: self.limit])
            self._pending, self._count = [flat[self.limit:]], len(flat) - self.limit

    def close(self) -> list[dict[str, Any]]:
        if self._count:
            self._write(np.concatenate(self._pending))
        return self.shards

    def _write(self, ids: np.ndarray) -> None:
        name = f"shard-{len(self.shards):05d}.bin"
        data = ids.tobytes()
        (self.folder / name).write_bytes(data)
        self.shards.append({"file": name, "tokens": len(ids),
                            "sha256": hashlib.sha256(data).hexdigest()})


def _encoded(tokenizer: Tokenizer, docs: Iterator[str]) -> Iterator[tuple[list[int], int]]:
    """(ids, source bytes) per document; a BPE encodes batches of documents at once."""
    batch_encode: Callable[[list[str]], list[list[int]]] | None = \
        getattr(tokenizer, "encode_batch", None)
    while group := [doc for _, doc in zip(range(_ENCODE_BATCH), docs, strict=False)]:
        encoded = batch_encode(group) if batch_encode else [tokenizer.encode(d) for d in group]
        for doc, ids in zip(group, encoded, strict=True):
            yield ids, len(doc.encode("utf-8"))


def _tokenizer(kind: str, vocab_size: int | None, files: list[Path], folder: Path,
               field: str) -> Tokenizer:
    if kind == "byte":
        return ByteTokenizer()
    if kind == "bpe":
        if vocab_size is None or vocab_size <= BPE_MIN_VOCAB:
            raise InputError(f"vocab_size: got {vocab_size}; a byte-level BPE needs more than "
                             f"{BPE_MIN_VOCAB} ids (256 bytes and the end-of-document id)")
        return train_bpe(documents(files, field), vocab_size, folder / "tokenizer.json")
    raise InputError(f"tokenizer: got {kind!r}; allowed: byte, bpe")


def prepare(inputs: Sequence[str | Path], out_dir: str | Path, tokenizer: str = "byte",
            vocab_size: int | None = None, shard_tokens: int = SHARD_TOKENS,
            field: str = "text") -> dict[str, Any]:
    """Tokenize `inputs` (text files, `.jsonl` files, folders) into shards at `out_dir`;
    returns its meta. `tokenizer`: "byte" or "bpe" (trained here, `vocab_size` ids)."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out}: already exists; remove it or choose another folder")
    files = input_files(inputs)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = _scratch(out)
    try:
        meta = _write(files, work, _tokenizer(tokenizer, vocab_size, files, work, field),
                      shard_tokens, field)
        os.rename(work, out)  # atomic; fails if another writer made `out` meanwhile
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return meta


def _scratch(out: Path) -> Path:
    """A new empty sibling of `out` to fill and rename (mode from the umask, unlike
    tempfile.mkdtemp's 0700)."""
    work = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}"
    work.mkdir()
    return work


def _write(files: list[Path], folder: Path, tokenizer: Tokenizer, shard_tokens: int,
           field: str) -> dict[str, Any]:
    writer = _ShardWriter(folder, dtype_for(tokenizer.vocab_size), shard_tokens)
    docs = tokens = source_bytes = 0
    for ids, size in _encoded(tokenizer, documents(files, field)):
        writer.add(np.array([*ids, tokenizer.eos_id], dtype=np.int64))
        docs, tokens, source_bytes = docs + 1, tokens + len(ids) + 1, source_bytes + size
    meta: dict[str, Any] = {
        "format": FORMAT, "tokenizer": tokenizer.spec(), "vocab_size": tokenizer.vocab_size,
        "eos_id": tokenizer.eos_id, "dtype": writer.dtype.name, "documents": docs,
        "tokens": tokens, "source_bytes": source_bytes,
        "bytes_per_token": source_bytes / tokens if tokens else math.nan,
        "shards": writer.close(), "files": _extra_files(folder),
    }
    meta["hash"] = content_hash(meta)
    (folder / META).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _extra_files(folder: Path) -> dict[str, str]:
    """sha256 of the files beside the shards (a BPE's tokenizer.json)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.suffix == ".json"}


def content_hash(meta: dict[str, Any]) -> str:
    """sha256 of the meta without its hash (shard and file hashes included)."""
    body = {key: value for key, value in meta.items() if key != "hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_meta(folder: Path) -> dict[str, Any]:
    try:
        meta: dict[str, Any] = json.loads((folder / META).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{folder / META}: not a prepared token folder ({exc})") from None
    if meta.get("format") != FORMAT or meta.get("hash") != content_hash(meta):
        raise InputError(f"{folder / META}: not {FORMAT} or its hash does not match")
    return meta


def once(folder: Path, make: Callable[[Path], object]) -> bool:
    """Run `make(folder)` unless `folder` holds a meta.json; of several processes racing,
    one makes it while the others wait on a lock beside it. True: this call made it."""
    if (folder / META).exists():
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (folder / META).exists():
            return False
        make(folder)
        return True


def fetch(url: str, cache: Path | None = None) -> Path:
    """A local copy of the token folder at `url` (gs://, any fsspec URL), made once per
    content hash and checked against the shard hashes of its meta.json."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(url)
    try:
        meta = json.loads(fs.cat_file(f"{root}/{META}"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{url}/{META}: not a prepared token folder ({exc})") from None
    local = (cache or cache_root()) / str(meta.get("hash", "unhashed"))
    once(local, lambda folder: _download(fs, root, meta, folder, url))
    return local


def _download(fs: Any, root: str, meta: dict[str, Any], folder: Path, url: str) -> None:
    work = _scratch(folder)
    try:
        names = [shard["file"] for shard in meta["shards"]] + [*meta["files"], META]
        for name in names:
            fs.get_file(f"{root}/{name}", str(work / name))
        _verify(work, meta, url)
        os.rename(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _verify(folder: Path, meta: dict[str, Any], url: str) -> None:
    read_meta(folder)
    expected = {s["file"]: s["sha256"] for s in meta["shards"]} | meta["files"]
    for name, digest in expected.items():
        with (folder / name).open("rb") as data:
            if hashlib.file_digest(data, "sha256").hexdigest() != digest:
                raise InputError(f"{url}/{name}: its sha256 differs from {META}'s")


class TokenWindows:
    """Map-style dataset of non-overlapping windows of `seq_len + 1` token ids, read from the
    shards with np.memmap: sample i -> LongTensor[seq_len + 1]. A window never spans two
    shards (each shard's tail shorter than a window is left out).

    `path`: a prepared folder, or a gs:// (fsspec) URL copied once into a local cache.
    `prepare_from`: a corpus (runtime.data.corpus) prepared at `path` on first use when
    missing, `prepare_max_files` of its files (all: None), with `prepare_tokenizer`."""

    def __init__(self, path: str, seq_len: int, prepare_from: str | None = None,
                 prepare_max_files: int | None = None, prepare_tokenizer: str = "byte",
                 prepare_vocab_size: int | None = None) -> None:
        if seq_len < 1:
            raise InputError(f"seq_len: got {seq_len}; must be at least 1")
        self.seq_len = seq_len
        if "://" in path:
            self.folder = fetch(path)
        else:
            self.folder = Path(path)
            if prepare_from is not None:
                files = corpus_files(prepare_from, prepare_max_files)
                once(self.folder, lambda out: prepare(files, out, prepare_tokenizer,
                                                      prepare_vocab_size))
        self.meta = read_meta(self.folder)
        self.vocab_size: int = self.meta["vocab_size"]
        self.eos_id: int = self.meta["eos_id"]
        self.bytes_per_token: float = self.meta["bytes_per_token"]
        window = seq_len + 1
        self._ends = list(accumulate(s["tokens"] // window for s in self.meta["shards"]))
        if not self._ends or not self._ends[-1]:
            raise InputError(f"{self.folder}: no shard holds a window of {window} tokens")
        self._maps: list[np.memmap[Any, Any]] | None = None

    def __len__(self) -> int:
        return self._ends[-1]

    def __getitem__(self, index: int) -> torch.Tensor:
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} of {len(self)}")
        shard = bisect_right(self._ends, index)
        start = (index - (self._ends[shard - 1] if shard else 0)) * (self.seq_len + 1)
        ids = self._shards()[shard][start:start + self.seq_len + 1]
        return torch.from_numpy(ids.astype(np.int64))

    def tokenizer(self) -> Tokenizer:
        """The tokenizer the shards were made with."""
        return load_tokenizer(self.meta["tokenizer"], base=self.folder)

    def _shards(self) -> list[np.memmap[Any, Any]]:
        if self._maps is None:  # mapped in the process that reads (a producer)
            self._maps = [np.memmap(self.folder / s["file"], dtype=self.meta["dtype"],
                                    mode="r") for s in self.meta["shards"]]
        return self._maps

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": None}
