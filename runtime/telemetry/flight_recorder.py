"""PyTorch Flight Recorder dumps into `flight_recorder` rows, and torch's analysis of them.

The Flight Recorder keeps the last collectives of every process group of a process in a ring
(on by default in torch 2.13, 2000 entries; reference/telemetry.md §2). A dump comes in two
forms with the same keys: pickle (`_dump_fr_trace()`, the files `<prefix><rank>` torch writes
and `torchfrtrace` reads; entries carry stack frames) and JSON (`_dump_fr_trace_json()`, no
frames). Unset times are None in the pickle and 0 in JSON; both become 0 here. Neither form
names its rank, so a file's rank is the number its name ends with, as torch names them.

Pickles are read with an unpickler that refuses every class: a dump holds only dicts, lists,
tuples, strings and numbers, so a file that needs anything else is refused, never run. A dump
nested deeper than MAX_DEPTH is refused (a pickle builds any depth without recursing; JSON
output and torch's analyzer then would), and a number outside its column's range
(runtime/telemetry/columns.py) is an error naming the entry and field, never stored wrapped.

`analyze` matches the ranks' entries with torch's own analyzer
(`torch.distributed.flight_recorder`, what `torchfrtrace` runs) and returns its findings as
sentences. On gloo the dumps' `pg_config` does not name the process groups their entries use
(`{"": {...}}`), which makes the analyzer fail with `KeyError: ('0', 0)`; the groups are
rebuilt here from the entries before it runs, without patching torch.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runtime.errors import Category, RuntimeFailure
from runtime.telemetry import columns
from runtime.telemetry.writer import Row, TelemetryWriter, utc_now

TABLE = "flight_recorder"
PREFIX = "comm_lib_trace_rank_"  # torch's default dump file name (TORCH_FR_DUMP_TEMP_FILE)
_RANK = re.compile(r"(\d+)(\.json)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ANALYZER_LOG = "Flight Recorder"  # the logger torch's analyzer prints its findings to
MAX_DEPTH = 32  # a dump: entries -> entry -> input_sizes -> a tensor's sizes, and frames


class FlightRecorderError(RuntimeFailure):
    """A dump is not a Flight Recorder dump, or the dumps cannot be analysed together."""

    category = Category.INVALID_INPUT


@dataclass(frozen=True)
class Dump:
    """One rank's dump, parsed (pickle or JSON) and checked."""

    source: str  # the file, or "this process", for messages
    rank: int
    data: Mapping[str, Any]

    @property
    def entries(self) -> list[dict[str, Any]]:
        return list(self.data["entries"])

    @property
    def version(self) -> str:
        return str(self.data["version"])


def parse_dump(raw: bytes, rank: int, source: str) -> Dump:
    """A dump in either form; raises FlightRecorderError naming `source` when it is not one."""
    start = raw.lstrip()[:1]
    if start == b"{":
        data = _from_json(raw, source)
    elif start == b"\x80":
        data = _from_pickle(raw, source)
    else:
        raise FlightRecorderError(f"{source}: not a Flight Recorder dump (neither JSON nor a "
                                  "pickle)")
    _check(data, source)
    problem = columns.out_of_range(TABLE, "rank", rank)
    if problem:
        raise FlightRecorderError(f"{source}: the rank in the file name: {problem}")
    return Dump(source, rank, data)


def dump_name(name: str) -> bool:
    """Whether a file name is a dump's: it ends in a rank (`.json` aside) and is not hidden
    (`dump_to`'s temporary files are)."""
    return not name.startswith(".") and _RANK.search(name) is not None


def read_dump(path: Path) -> Dump:
    """A dump file, its rank from its name (`<prefix><rank>` or `<prefix><rank>.json`)."""
    found = _RANK.search(path.name)
    if found is None:
        raise FlightRecorderError(f"{path}: cannot tell the rank: name a dump <prefix><rank> "
                                  f"(e.g. {PREFIX}0) as torch does")
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise FlightRecorderError(f"{path}: cannot read: {error.strerror or error}") from error
    return parse_dump(raw, int(found.group(1)), str(path))


def read_folder(folder: Path) -> list[Dump]:
    """The dumps in a folder: its files whose names end in a rank."""
    if not folder.is_dir():
        raise FlightRecorderError(f"{folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and dump_name(p.name))
    if not files:
        raise FlightRecorderError(f"{folder}: no Flight Recorder dumps (files named "
                                  "<prefix><rank> or <prefix><rank>.json)")
    return one_per_rank([read_dump(path) for path in files])


def one_per_rank(dumps: Sequence[Dump]) -> list[Dump]:
    """The dumps by rank; two of one rank (a pickle beside its JSON) is an error."""
    seen: dict[int, Dump] = {}
    for dump in dumps:
        if dump.rank in seen:
            raise FlightRecorderError(f"two dumps of rank {dump.rank}: {seen[dump.rank].source}"
                                      f" and {dump.source}; keep one")
        seen[dump.rank] = dump
    return [seen[rank] for rank in sorted(seen)]


def rows(dump: Dump) -> list[Row]:
    """One `flight_recorder` row per entry (without the identity columns but `rank`)."""
    status = dump.data.get("pg_status") or {}
    found = []
    for index, entry in enumerate(dump.entries):
        try:
            found.append(_in_range(_row(entry, status, dump.rank)))
        except (KeyError, TypeError, ValueError) as error:
            raise FlightRecorderError(f"{dump.source}: entries[{index}]: {_problem(error)}") \
                from error
    return found


# --- this process's own buffer --------------------------------------------------------------

def dump_bytes() -> bytes:
    """This process's Flight Recorder buffer as torch pickles it (with stack frames)."""
    import torch.distributed  # torch: only where a rank dumps

    c10d: Any = torch._C._distributed_c10d  # its type stubs omit the Flight Recorder's calls
    return bytes(c10d._dump_fr_trace())


def dump_to(folder: Path, rank: int | None = None) -> Path:
    """Write this process's buffer to `folder/<PREFIX><rank>` (what `torchfrtrace` reads);
    atomically, so a reader never sees half a dump. `rank`: the global rank by default."""
    rank = _own_rank() if rank is None else rank
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{PREFIX}{rank}"
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(dump_bytes())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def dump_rank(writer: TelemetryWriter) -> int:
    """Queue this process's buffer as `flight_recorder` rows on the writer (its identity
    fills the other columns); the number of rows. Never blocks, like every write."""
    rank = writer.identity.get("rank")
    own = rank if isinstance(rank, int) and rank >= 0 else _own_rank()
    dump = parse_dump(dump_bytes(), own, "this process")
    found = rows(dump)
    for row in found:
        writer.write(TABLE, row)
    return len(found)


def _own_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


# --- analysis -------------------------------------------------------------------------------

def analyze_dumps(folder: Path) -> list[str]:
    """The findings of torch's analyzer on the dumps in a folder (empty: all ranks agree)."""
    return analyze(read_folder(folder))


def analyze(dumps: Sequence[Dump]) -> list[str]:
    """Missing dumps, collectives some ranks never joined or issued differently, and ranks
    whose last enqueued collective lags (where a hang or a skipped collective sits)."""
    dumps = one_per_rank(dumps)
    if not dumps:
        return []
    for dump in dumps:
        rows(dump)  # every entry checked first: a bad one is named, not a KeyError deep inside
    config = pg_config(dumps)
    database = _torch_analysis(dumps, config)
    return [*_missing_dumps(dumps, config), *_collective_findings(database),
            *_lagging(dumps)]


def pg_config(dumps: Sequence[Dump]) -> dict[str, dict[str, str]]:
    """Every process group the entries use, with its ranks, as the analyzer expects it.

    Groups a dump's `pg_config` names are kept. Others (all of them on gloo) are rebuilt:
    the default group (desc `default_pg`) has every rank any dump declares or any dump came
    from; another group has the ranks whose entries use it.
    """
    declared: dict[str, dict[str, str]] = {}
    world: set[int] = {dump.rank for dump in dumps}
    for dump in dumps:
        for name, group in (dump.data.get("pg_config") or {}).items():
            world |= set(_ranks(group.get("ranks", "[]")))
            if name and name not in declared:
                declared[name] = {"name": name, "desc": str(group.get("desc", "")),
                                  "ranks": str(group.get("ranks", "[]"))}
    users: dict[tuple[str, str], set[int]] = defaultdict(set)
    for dump in dumps:
        for entry in dump.entries:
            name, desc = entry["process_group"]
            users[(str(name), str(desc))].add(dump.rank)
    for (name, desc), ranks in users.items():
        if name not in declared:
            members = world if desc == "default_pg" else ranks
            declared[name] = {"name": name, "desc": desc, "ranks": str(sorted(members))}
    return declared


def _torch_analysis(dumps: Sequence[Dump], config: dict[str, dict[str, str]]) -> Any:
    """torch's analyzer (`build_db`, what `torchfrtrace` runs) on the dumps, quietly."""
    with _quiet_analyzer():
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig

        args = JobConfig().parse_args(["--allow-incomplete-ranks"])
        details = {f"{PREFIX}{d.rank}": {
            "host_name": f"rank{d.rank}", "rank": d.rank, "version": d.version,
            "entries": [dict(e) for e in d.entries], "pg_config": config} for d in dumps}
        try:
            return build_db(details, args, dumps[0].version)
        except (AssertionError, KeyError, ValueError, IndexError) as error:
            raise FlightRecorderError(
                f"torch's Flight Recorder analyzer failed on the dumps of ranks "
                f"{[d.rank for d in dumps]}: {type(error).__name__}: {error}") from error


@contextmanager
def _quiet_analyzer() -> Iterator[None]:
    """The analyzer prints every finding (and a note that `tabulate` is missing) to stderr;
    here they are returned instead."""
    logger = logging.getLogger(_ANALYZER_LOG)
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def _missing_dumps(dumps: Sequence[Dump], config: Mapping[str, Mapping[str, str]]) -> list[str]:
    dumped = {dump.rank for dump in dumps}
    found = []
    for name, group in sorted(config.items()):
        missing = set(_ranks(group["ranks"])) - dumped
        if missing:
            found.append(f"no dump from ranks {sorted(missing)} of process group "
                         f"{_group(name, group['desc'])}")
    return found


def _collective_findings(database: Any) -> list[str]:
    found = []
    for collective in database.collectives:
        what = (f"collective {collective.collective_seq_id} ({collective.collective_name}, "
                f"process group {collective.pg_desc})")
        if collective.missing_ranks:
            found.append(f"not all ranks joining {what}: missing ranks "
                         f"{sorted(collective.missing_ranks)}")
        for rank, other in sorted((collective.mismatch_collectives or {}).items()):
            found.append(f"{what} differs on rank {rank}: {other.type_of_mismatch}")
    return found


def _lagging(dumps: Sequence[Dump]) -> list[str]:
    """Per process group, ranks whose last enqueued collective is behind the others'."""
    last: dict[str, dict[int, int]] = defaultdict(dict)
    for dump in dumps:
        for pg_id, status in (dump.data.get("pg_status") or {}).items():
            last[str(pg_id)][dump.rank] = _int(status.get("last_enqueued_collective"), -1)
    found = []
    for pg_id, by_rank in sorted(last.items()):
        low, high = min(by_rank.values()), max(by_rank.values())
        if low < high:
            behind = sorted(rank for rank, seq in by_rank.items() if seq == low)
            found.append(f"process group {pg_id}: ranks {behind} enqueued collectives up to "
                         f"{low}, others up to {high}: the ranks stopped before collective "
                         f"{low + 1}")
    return found


# --- parsing --------------------------------------------------------------------------------

class _DataOnly(pickle.Unpickler):
    """Unpickles plain data only: a dump needs no class, so none is ever imported."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}, which a dump never does")


def _from_pickle(raw: bytes, source: str) -> Any:
    try:
        return _DataOnly(io.BytesIO(raw)).load()
    except Exception as error:  # unpickling raises many types on a damaged or foreign file
        raise FlightRecorderError(f"{source}: not a Flight Recorder pickle: {error}") from error


def _from_json(raw: bytes, source: str) -> Any:
    try:
        return json.loads(raw)
    except RecursionError as error:  # the decoder recurses per level
        raise FlightRecorderError(f"{source}: nested deeper than {MAX_DEPTH} levels: not a "
                                  "Flight Recorder dump") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise FlightRecorderError(f"{source}: not JSON: {error}") from error


def _check_depth(data: Any, source: str) -> None:
    """No deeper than MAX_DEPTH, walked a level at a time (no recursion on a deep dump)."""
    level = [data]
    for _ in range(MAX_DEPTH):
        level = [child for value in level for child in (
            value.values() if isinstance(value, dict) else value)
            if isinstance(child, dict | list | tuple)]
        if not level:
            return
    raise FlightRecorderError(f"{source}: nested deeper than {MAX_DEPTH} levels: not a Flight "
                              "Recorder dump")


def _check(data: Any, source: str) -> None:
    if not isinstance(data, dict):
        raise FlightRecorderError(f"{source}: expected a mapping, got {type(data).__name__}")
    _check_depth(data, source)
    for key, kind in (("version", str), ("entries", list), ("pg_config", dict)):
        if not isinstance(data.get(key), kind):
            raise FlightRecorderError(f"{source}: {key}: expected a {kind.__name__}, got "
                                      f"{data.get(key)!r:.60}")
    if not re.fullmatch(r"2\.\d+", data["version"]):
        raise FlightRecorderError(f"{source}: version {data['version']!r} is not supported "
                                  "(2.x is)")


def _row(entry: Mapping[str, Any], status: Mapping[str, Any], rank: int) -> Row:
    name, desc = entry["process_group"]
    pg_id = str(entry["pg_id"])
    created = _ns(entry["time_created_ns"])
    problem = columns.out_of_range(TABLE, "time_created_ns", created)
    if problem:  # checked before it becomes `ts`, which it would overflow
        raise ValueError(f"time_created_ns: {problem}")
    group = status.get(pg_id) or {}
    return {
        # An entry without a creation time (never seen) gets the load time: the tables'
        # TTL would otherwise drop a 1970 row at once.
        "ts": _EPOCH + timedelta(microseconds=created // 1000) if created else utc_now(),
        "rank": rank, "pg_id": pg_id, "pg_name": str(name), "pg_desc": str(desc),
        "record_id": int(entry["record_id"]),
        "collective_seq_id": int(entry["collective_seq_id"]),
        "p2p_seq_id": int(entry["p2p_seq_id"]), "op_id": int(entry["op_id"]),
        "profiling_name": str(entry["profiling_name"]),
        "is_p2p": bool(entry.get("is_p2p", False)), "state": str(entry["state"]),
        "retired": bool(entry["retired"]), "time_created_ns": created,
        "time_started_ns": _ns(entry.get("time_discovered_started_ns")),
        "time_completed_ns": _ns(entry.get("time_discovered_completed_ns")),
        "duration_ms": _float(entry.get("duration_ms")),
        "timeout_ms": _ns(entry.get("timeout_ms")),
        "input_sizes": json.dumps(entry.get("input_sizes", [])),
        "input_dtypes": [str(t) for t in entry.get("input_dtypes", [])],
        "output_sizes": json.dumps(entry.get("output_sizes", [])),
        "output_dtypes": [str(t) for t in entry.get("output_dtypes", [])],
        "last_enqueued": _int(group.get("last_enqueued_collective"), -1),
        "last_started": _int(group.get("last_started_collective"), -1),
        "last_completed": _int(group.get("last_completed_collective"), -1),
    }


def _in_range(row: Row) -> Row:
    """The row, if every value fits its column (ClickHouse would wrap the rest)."""
    for column, value in row.items():
        problem = None if isinstance(value, bool) else columns.out_of_range(TABLE, column, value)
        if problem:
            raise ValueError(f"{column}: {problem}")
    return row


def _ns(value: Any) -> int:
    """A time or count: None (pickle) and 0 (JSON) both mean unset."""
    return int(value) if value else 0


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any, default: int) -> int:
    """pg_status counters: ints in the pickle, strings in JSON."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _ranks(text: Any) -> list[int]:
    """`"[0, 1]"`, as pg_config writes a group's ranks."""
    try:
        found = json.loads(text) if isinstance(text, str) else list(text)
        return [int(rank) for rank in found]
    except (TypeError, ValueError) as error:
        raise FlightRecorderError(f"pg_config ranks {text!r}: expected a list of ranks") \
            from error


def _group(name: str, desc: str) -> str:
    return f"{name}:{desc}" if desc else name


def _problem(error: Exception) -> str:
    if isinstance(error, KeyError):
        return f"missing {error.args[0]!r}"
    return str(error)
