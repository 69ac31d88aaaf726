"""The tails of a run's Ray logs: each training rank's and each service actor's output.

Ray writes every worker process's stdout and stderr to `worker-<worker id>-<job id>-<pid>.out`
and `.err` in the session's log folder, the actor's class on the file's second line
(`:actor_name:<Class>`). Ray Train (v2) also writes one JSON log per training worker,
`train/ray-train-app-worker-<worker id>.log`, whose records carry `run_name`, `world_rank`
and `process`: that is how a rank is matched to its files, even after a hard kill. Only the
node the driver runs on is read (a cluster's other nodes keep their own; `gkr logs` reads
those through Kubernetes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
TRAIN_WORKER = "RayTrainWorker"  # the actor class of Ray Train's workers
_FIRST_RECORDS = 20  # records read from an app log to find its rank
_HEADER = (b":job_id:", b":actor_name:", b":task_name:")  # Ray's lines, not the process's


@dataclass(frozen=True)
class WorkerLogs:
    """One Ray worker process of this run and its output files."""

    name: str  # how the bundle names it: rank-1, group-0-rank-1, service-AuxWorker-1234
    pid: int
    files: tuple[Path, ...]  # .out and .err


def session_logs() -> Path | None:
    """The log folder of the Ray session this process is connected to (not
    /tmp/ray/session_latest, which is whichever session started last on the machine)."""
    try:
        import ray

        node = ray._private.worker._global_node  # Ray has no public accessor for it
        return Path(node.get_logs_dir_path()) if node is not None else None
    except Exception as error:  # no Ray, or a Ray without the attribute
        log.info("crash bundle: Ray's log folder is unknown: %s", error)
        return None


def run_workers(folder: Path, run_id: str, job_id: str) -> list[WorkerLogs]:
    """The training ranks of `run_id` (by their Ray Train logs) and the other actors of the
    Ray job `job_id` (the services, the monitor), with their output files."""
    ranks = list(_train_workers(folder, run_id))
    taken = {path for worker in ranks for path in worker.files}
    return ranks + [worker for worker in _actors(folder, job_id) if not set(worker.files) & taken]


def _train_workers(folder: Path, run_id: str) -> Iterator[WorkerLogs]:
    for app_log in sorted((folder / "train").glob("ray-train-app-worker-*.log")):
        record = _rank_record(app_log)
        if record is None:
            continue
        run_name = str(record.get("run_name", ""))
        group = run_name.removeprefix(f"{run_id}-group-")
        if run_name != run_id and group == run_name:
            continue
        worker_id = app_log.stem.removeprefix("ray-train-app-worker-")
        name = f"rank-{record['world_rank']}" if run_name == run_id else \
            f"group-{group}-rank-{record['world_rank']}"
        files = tuple(sorted(folder.glob(f"worker-{worker_id}-*.out"))) + \
            tuple(sorted(folder.glob(f"worker-{worker_id}-*.err")))
        yield WorkerLogs(name, int(record.get("process", 0)), files)


def _rank_record(app_log: Path) -> dict[str, Any] | None:
    """The first record of a Ray Train app log that names its rank."""
    try:
        with app_log.open(encoding="utf-8", errors="replace") as lines:
            for _, line in zip(range(_FIRST_RECORDS), lines, strict=False):
                record = json.loads(line)
                if isinstance(record, dict) and "world_rank" in record:
                    return record
    except (OSError, ValueError):
        return None
    return None


def _actors(folder: Path, job_id: str) -> Iterator[WorkerLogs]:
    """The actors of the job other than Ray Train's workers: their class from the header."""
    for out in sorted(folder.glob(f"worker-*-{job_id}-*.out")):
        actor = _actor_name(out)
        if not actor or actor == TRAIN_WORKER:
            continue
        pid = out.stem.rsplit("-", 1)[-1]
        err = out.with_suffix(".err")
        files = (out, err) if err.exists() else (out,)
        yield WorkerLogs(f"service-{actor}-{pid}", int(pid) if pid.isdigit() else 0, files)


def _actor_name(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            head = [line for _, line in zip(range(3), lines, strict=False)]
    except OSError:
        return ""
    found = [line.strip().removeprefix(":actor_name:") for line in head
             if line.startswith(":actor_name:")]
    return found[0] if found else ""


def tail(path: Path, lines: int, max_bytes: int) -> bytes:
    """The last `lines` lines of a file, reading at most `max_bytes` from its end."""
    if lines <= 0:
        return b""
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(size - max_bytes, 0))
        data = handle.read(max_bytes)
    kept = [line for line in data.splitlines(keepends=True) if not line.startswith(_HEADER)]
    return b"".join(kept[-lines:])
