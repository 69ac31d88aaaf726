"""JSONL text: documents read line by line, and `JsonlText`, a dataset over one file.

A bad line is an `InputError` naming `file:line` and what is wrong, whether it is met by
`runtime.data.tokens.prepare` or by a producer reading a sample.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from runtime.data.remote import fetch_file, is_remote
from runtime.data.tokenizer import Tokenizer, load_tokenizer
from runtime.errors import Category, RuntimeFailure

IGNORE_INDEX = -100  # what torch's cross_entropy skips (its default ignore_index)
_SCAN_BYTES = 1 << 24  # the index is built from the file in blocks of this size


class InputError(RuntimeFailure):
    """An input file is missing, unreadable or malformed; the message starts `file:line:`."""

    category = Category.INVALID_INPUT


def text_of(raw: bytes, field: str, where: str) -> str:
    """The `field` string of one JSON line; anything else is an InputError at `where`."""
    try:
        record = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{where}: not JSON: {exc}") from None
    value = record.get(field) if isinstance(record, dict) else None
    if not isinstance(value, str):
        raise InputError(f"{where}: needs a string field {field!r} (a JSON object per line)")
    return value


def read_jsonl(path: Path, field: str = "text") -> Iterator[str]:
    """The `field` of every non-blank line, in file order."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if raw.strip():
                yield text_of(raw, field, f"{path}:{number}")


def line_index(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and 1-based numbers of the non-blank lines of `path` (one pass)."""
    ends: list[np.ndarray] = []
    with path.open("rb") as raw:
        base = 0
        while block := raw.read(_SCAN_BYTES):
            ends.append(np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n")) + base)
            base += len(block)
    newline = np.concatenate([*ends, np.array([base], np.int64)]).astype(np.int64)
    starts = np.concatenate([[0], newline[:-1] + 1]).astype(np.int64)
    keep = newline - starts > 1  # skip empty lines (and a lone "\r")
    return starts[keep], np.flatnonzero(keep) + 1


class JsonlText:
    """Sample i = the i-th non-blank line's `field`, tokenized with an end-of-document id,
    cut to `seq_len + 1` ids and padded with -100 (ignored by the loss): LongTensor[seq_len+1].
    The line offsets are indexed once, at construction; lines are read on demand. A gs://
    (fsspec) `path` is copied into the local cache once per version."""

    def __init__(self, path: str, seq_len: int, tokenizer: dict[str, Any] | str = "byte",
                 field: str = "text") -> None:
        self.path = fetch_file(path) if is_remote(path) else Path(path)
        self.seq_len, self.field = seq_len, field
        if not self.path.is_file():
            raise InputError(f"{self.path}: no such file")
        self.tokenizer: Tokenizer = load_tokenizer(tokenizer)
        self.vocab_size = self.tokenizer.vocab_size
        self.starts, self.numbers = line_index(self.path)
        self._fd: int | None = None
        self._size = self.path.stat().st_size

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, index: int) -> torch.Tensor:
        text = text_of(self._line(index), self.field, f"{self.path}:{self.numbers[index]}")
        ids = [*self.tokenizer.encode(text), self.tokenizer.eos_id][: self.seq_len + 1]
        out = torch.full((self.seq_len + 1,), IGNORE_INDEX, dtype=torch.long)
        out[: len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out

    def _line(self, index: int) -> bytes:
        if self._fd is None:  # opened in the process that reads (a producer), not pickled
            self._fd = os.open(self.path, os.O_RDONLY)
        start = int(self.starts[index])
        end = int(self.starts[index + 1]) if index + 1 < len(self.starts) else self._size
        # pread: safe from the producer's read threads at once (data.io_threads).
        return os.pread(self._fd, end - start, start).split(b"\n", 1)[0]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fd": None}

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)  # type: ignore[arg-type]
