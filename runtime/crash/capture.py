"""A rank's part of a crash bundle: its own report, written as its exception leaves the loop.

Every rank keeps its last log records in a ring (a logging handler on the root logger, so
records of every library are kept, not only the runtime's). When the training loop raises,
the rank writes `ranks/<rank>.json` (its identity, the exception with its whole traceback and
chained causes, the ring) and its Flight Recorder buffer into the run's bundle folder, then
the exception goes on to Ray Train unchanged. On a cluster, this is the only place where a
rank's traceback and log lines reach the bundle in full: the driver cannot read other nodes'
files. Its secrets are redacted (runtime.crash.redact). Bounded in time and size; a failure
to write is logged, never raised.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import traceback
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from runtime.crash.files import Folder
from runtime.crash.redact import redact
from runtime.crash.where import bundle_uri
from runtime.identity import Role
from runtime.run.config import TrainConfig

log = logging.getLogger(__name__)
TEXT_BOUND = 256 * 1024  # of an exception's message or traceback
# A larger buffer is left out: its entries reach the flight_recorder table anyway (every rank
# adds them when it stops, runtime.train.telemetry), and every failed rank writes its own.
FLIGHT_RECORDER_BYTES = 1 << 20
FORMAT = "%(asctime)s %(levelname)s %(name)s %(filename)s:%(lineno)d %(message)s"


class LogRing(logging.Handler):
    """The last `lines` formatted log records of this process."""

    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines: deque[str] = deque(maxlen=max(lines, 1))
        self.setFormatter(logging.Formatter(FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        with suppress(Exception):  # a record that cannot be formatted is not worth a failure
            self.lines.append(self.format(record)[:4096])


def rank_name(rank: int, replica_group: int = -1) -> str:
    """How the bundle names a rank's files: rank-1, or group-0-rank-1 with replica groups."""
    return f"rank-{rank}" if replica_group < 0 else f"group-{replica_group}-rank-{rank}"


@contextmanager
def rank_failures(config: TrainConfig, run_id: str, rank: int,
                  replica_group: int = -1) -> Iterator[None]:
    """Run the body; if it raises, write this rank's report into the bundle, then re-raise."""
    section = config.crash
    if not section.enabled:
        yield
        return
    ring = LogRing(section.log_lines)
    logging.getLogger().addHandler(ring)
    try:
        yield
    except Exception as error:
        write_rank_report(config, run_id, rank, replica_group, error, list(ring.lines))
        raise
    finally:
        logging.getLogger().removeHandler(ring)


def write_rank_report(config: TrainConfig, run_id: str, rank: int, replica_group: int,
                      error: BaseException, lines: list[str]) -> None:
    """The report and the Flight Recorder buffer, in a thread given `crash.timeout_s`."""
    report = rank_report(run_id, rank, replica_group, error, lines)
    name = rank_name(rank, replica_group)
    folder = Folder(bundle_uri(config, run_id))
    limit = min(config.crash.max_bytes // 32, FLIGHT_RECORDER_BYTES)

    def write() -> None:
        try:
            text = json.dumps(report, indent=1).encode()  # its secrets out (crash.redact)
            folder.write(f"ranks/{name}.json", redact(text, f"ranks/{name}.json").data)
            dump = _flight_recorder(limit)
            if dump:
                sub = "" if replica_group < 0 else f"group-{replica_group}/"
                folder.write(f"flight_recorder/{sub}comm_lib_trace_rank_{rank}", dump)
        except Exception as failure:  # the rank's own error is what must get out
            log.warning("crash bundle: %s's report not written to %s: %s", name, folder.uri,
                        failure)

    writer = threading.Thread(target=write, name="gkr-crash-report", daemon=True)
    writer.start()
    writer.join(config.crash.timeout_s)
    if writer.is_alive():
        log.warning("crash bundle: %s's report still not written after %.0f s; going on",
                    name, config.crash.timeout_s)


def rank_report(run_id: str, rank: int, replica_group: int, error: BaseException,
                lines: list[str]) -> dict[str, Any]:
    """What a rank says about its own failure."""
    from runtime.telemetry.identity import identity

    who = replace(identity(run_id, Role.WORKER, rank), replica_group=replica_group)
    return {
        "identity": who.row(),
        "pid": os.getpid(),
        "time": datetime.now(UTC).isoformat(),
        "exception": {
            "type": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error)[:TEXT_BOUND],
            "traceback": "".join(traceback.format_exception(error))[-TEXT_BOUND:],
        },
        "log_tail": lines,
    }


def _flight_recorder(limit: int) -> bytes:
    """This process's Flight Recorder buffer (empty when it has none or it is too large)."""
    try:
        from runtime.telemetry.flight_recorder import dump_bytes

        data = dump_bytes()
    except Exception as error:  # no process group, or a torch without the recorder
        log.info("crash bundle: no Flight Recorder buffer: %s", error)
        return b""
    return data if len(data) <= limit else b""
