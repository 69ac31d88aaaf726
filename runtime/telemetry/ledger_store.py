"""The sample ledger in the telemetry store: load a run's ledger files, read its verdict.

The files are `<folder>/<run_id>/*.jsonl`, one per rank incarnation, appended to only
(runtime/telemetry/ledger.py), one JSON object a line whose keys are the columns of
`sample_ledger_raw` (schema/0008_sample_ledger.sql): the engine parses them as they are
(JSONEachRow). A load is idempotent and incremental: it inserts the lines of a file past those
stored for its writer (started, rank, pid). A file's partial last line (a rank killed in the
middle of its write) is skipped and recorded, and the verdict names it; a bad complete line
is an error naming the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from runtime.errors import Category, RuntimeFailure
from runtime.telemetry.ledger_verdict import ORIGINS, Entries, Verdict, judge
from runtime.telemetry.store import QueryError, Store, describe, sql_file

__all__ = ["KEYS", "LedgerError", "NoLedger", "files_verdict", "load_ledger", "run_verdict"]

RAW_TABLE, TABLE, SKIPPED = "sample_ledger_raw", "sample_ledger", "sample_ledger_skipped"
KEYS = frozenset({"run_id", "started", "origin", "resumed_from", "step", "group", "rank",
                  "pid", "at", "slot", "slots", "epoch_size", "starts", "count",
                  "batch_starts", "batch_count"})  # a ledger line's keys (design, issue 24)
_ROW = re.compile(r"\(at row (\d+)\)")  # where ClickHouse's input formats say a row failed


class LedgerError(RuntimeFailure):
    """A ledger file cannot be loaded: names the file and line."""

    category = Category.INVALID_INPUT


class NoLedger(RuntimeFailure):
    """The run has no sample ledger in the store (nor files to load)."""

    category = Category.INVALID_INPUT


def load_ledger(store: Store, folder: Path, run_id: str) -> int:
    """Insert the lines of `<folder>/<run_id>/*.jsonl` not yet in the store, in one insert;
    the rows inserted. Safe to repeat, and to run again while files grow."""
    stored = {(s, r, p): n for s, r, p, n in
              store.query(sql_file("ledger_files.sql"), {"run": run_id}).rows}
    news = [_new_lines(store, path, run_id, stored)
            for path in sorted((folder / run_id).glob("*.jsonl"))]
    news = [new for new in news if new.rows]
    if news:
        try:
            store.insert_raw(RAW_TABLE, "JSONEachRow", b"".join(new.body for new in news))
        except QueryError as error:
            raise _bad_line(news, error) from error
    return sum(new.rows for new in news)


@dataclass(frozen=True)
class _NewLines:
    """A file's complete lines not yet stored: from line `after + 1` on."""

    path: Path
    after: int
    rows: int
    body: bytes


def _new_lines(store: Store, path: Path, run_id: str,
               stored: Mapping[tuple[int, int, int], int]) -> _NewLines:
    complete, _, partial = path.read_bytes().rpartition(b"\n")
    first = _first_line(path, complete, run_id) if complete else None
    if partial:
        _skipped(store, path, run_id, first, complete.count(b"\n") + (2 if complete else 1),
                 len(partial))
    if first is None:
        return _NewLines(path, 0, 0, b"")
    lines = complete.count(b"\n") + 1
    have = stored.get((first["started"], first["rank"], first["pid"]), 0)
    if have > lines:  # stored more than the file holds: not this file's rows; load it anew
        _forget(store, run_id, first)
        have = 0
    body = complete.split(b"\n", have)[-1] if have else complete
    return _NewLines(path, have, lines - have, body + b"\n" if lines > have else b"")


def _first_line(path: Path, complete: bytes, run_id: str) -> dict[str, Any]:
    """The file's first line, checked: the keys of a ledger line, of this run. The engine
    reads every line, but fills a key a line lacks with its column's default, so the keys
    are checked here, on the line that stands for the writer's format."""
    try:
        first = json.loads(complete.split(b"\n", 1)[0])
    except ValueError as error:
        raise LedgerError(f"{path}: line 1: not a JSON object ({error})") from error
    if not isinstance(first, dict) or KEYS - set(first):
        lacking = sorted(KEYS - set(first)) if isinstance(first, dict) else sorted(KEYS)
        raise LedgerError(f"{path}: line 1: not a ledger line: lacks {', '.join(lacking)}")
    if first["origin"] not in ORIGINS:
        raise LedgerError(f"{path}: line 1: origin {first['origin']!r} is not one of "
                          f"{', '.join(ORIGINS)}")
    if first["run_id"] != run_id:
        raise LedgerError(f"{path}: line 1: run_id {first['run_id']!r}, but the file is in "
                          f"run {run_id!r}'s folder")
    return first


def _bad_line(news: list[_NewLines], error: QueryError) -> LedgerError:
    """The engine's complaint about row N of the insert, as the file and line it came from."""
    where = _ROW.search(str(error))
    reason = str(error).split("DB::Exception: ")[-1].split(": (at row")[0]
    if not where:
        return LedgerError(f"{', '.join(str(n.path) for n in news)}: {reason}")
    row = int(where.group(1))
    for new in news:
        if row <= new.rows:
            return LedgerError(f"{new.path}: line {new.after + row}: {reason}")
        row -= new.rows
    return LedgerError(f"{news[-1].path}: {reason}")


def _skipped(store: Store, path: Path, run_id: str, first: Mapping[str, Any] | None,
             line: int, size: int) -> None:
    """Record the file's partial last line (replacing an earlier record of the file)."""
    known = first or {"rank": -1, "group": -1}
    store.insert(SKIPPED, [{"ts": datetime.now(UTC), "run": run_id, "run_id": run_id,
                            "file": path.name, "line": line, "bytes": size,
                            "rank": known["rank"], "replica_group": known["group"],
                            "role": "worker"}])


def _forget(store: Store, run_id: str, first: Mapping[str, Any]) -> None:
    store.command(f"DELETE FROM {TABLE} WHERE run_id = {{run:String}} AND started = "
                  "{started:UInt64} AND rank = {rank:Int32} AND pid = {pid:UInt32}",
                  {"run": run_id, "started": first["started"], "rank": first["rank"],
                   "pid": first["pid"]})


def run_verdict(store: Store, runs: Sequence[str]) -> Verdict:
    """The verdict over the runs' ledger rows in the store: one run, or several judged as one
    stream (the learners of a DiLoCo experiment, each a run of its own)."""
    rows = store.query(sql_file("ledger_entries.sql"), {"runs": list(runs)})
    if not rows.rows:
        named = ", ".join(repr(run) for run in runs)
        raise NoLedger(f"run{'s' * (len(runs) > 1)} {named} {'have' if len(runs) > 1 else 'has'}"
                       f" no sample ledger in the telemetry store {describe(store.dsn)}")
    columns = dict(zip(rows.columns, zip(*rows.rows, strict=True), strict=True))
    skipped = [row[0] for row in store.query(sql_file("ledger_skipped.sql"),
                                             {"runs": list(runs)}).rows]
    return judge(Entries.from_columns(columns), skipped)


def files_verdict(folder: Path, run_id: str) -> Verdict:
    """The verdict over `<folder>/<run_id>/*.jsonl` read here, without a store (tests, and a
    process that holds another chDB folder): the same rules for partial and bad lines."""
    rows, truncated = [], []
    for path in sorted((folder / run_id).glob("*.jsonl")):
        complete, _, partial = path.read_bytes().rpartition(b"\n")
        if partial:
            truncated.append(path.name)
        if complete:
            _first_line(path, complete, run_id)
            rows += [_parsed(path, number, line)
                     for number, line in enumerate(complete.split(b"\n"), 1)]
    if not rows:
        raise NoLedger(f"run {run_id!r} has no ledger files under {folder / run_id}")
    return judge(Entries.from_rows(rows), truncated)


def _parsed(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except ValueError as error:
        raise LedgerError(f"{path}: line {number}: not a JSON object ({error})") from error
    if not isinstance(row, dict) or KEYS - set(row):
        raise LedgerError(f"{path}: line {number}: not a ledger line (keys: "
                          f"{', '.join(sorted(KEYS))})")
    wrong = [key for key in sorted(KEYS) if not _typed(key, row[key])]
    if wrong:
        raise LedgerError(f"{path}: line {number}: {wrong[0]} is {row[wrong[0]]!r}: "
                          f"{_KINDS.get(wrong[0], 'an integer')}")
    return row


_KINDS = {"run_id": "a string", "origin": "a string", "at": "a number",
          "starts": "a list of integers", "batch_starts": "a list of integers"}


def _typed(key: str, value: object) -> bool:
    """Whether a value has its column's kind (bool is an int to Python, never to the store)."""
    def integer(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    kind = _KINDS.get(key, "an integer")
    if kind == "a string":
        return isinstance(value, str)
    if kind == "a number":
        return integer(value) or isinstance(value, float)
    if kind == "a list of integers":
        return isinstance(value, list) and all(map(integer, value))
    return integer(value)
