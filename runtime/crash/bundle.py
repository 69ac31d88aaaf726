"""The driver's part of a crash bundle: written when the run's training raises.

The ranks that raised have written their own reports by then (runtime.crash.capture); the
driver adds what only it knows or can reach: the failure as Ray Train reports it (a rank that
was killed outright appears only here), the tails of the Ray logs of every rank and service,
the resolved config and how the run was started, the code identity, the last committed
checkpoint, the run's events and the telemetry queries that fetch its metrics. `bundle.json`
is written last: a bundle is complete once it exists.

Every text part is written without its secrets (runtime.crash.redact): token-shaped values
and the values of secret-named keys in env files become `[REDACTED]`, and the manifest counts
them per part (`redacted`).

Writing never makes the failure worse: it runs in a thread that the driver waits for at most
`crash.timeout_s`, each part's error is recorded in the bundle and logged rather than raised,
and parts beyond `crash.max_bytes` are left out and listed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from runtime.crash import logs, queries
from runtime.crash.code import identify
from runtime.crash.files import MANIFEST, Folder
from runtime.crash.launch import Launch
from runtime.crash.redact import redact
from runtime.crash.where import bundle_uri
from runtime.errors import RuntimeFailure
from runtime.identity import Role
from runtime.run.config import TrainConfig

log = logging.getLogger(__name__)
Printer = Callable[[str], None]
VERSION = 1
TEXT_BOUND = 256 * 1024  # of one message or traceback
LOG_FILE_BYTES = 1 << 20  # read from the end of one log file, at most
EVENT_ROWS = 200
# What Ray Train says of a worker whose process died (WorkerHealthCheckFailedError's text).
_PID = re.compile(r"\bpid=(\d+)")
_RAY_LOG = re.compile(r"log_file_path='([^']+)'")


@dataclass(frozen=True)
class Crash:
    """What the driver knows when training raised."""

    config: TrainConfig
    run_id: str
    error: BaseException
    launch: Launch | None = None
    dsn: str | None = None  # the run's telemetry store; None: telemetry off
    started: datetime = field(default_factory=lambda: datetime.now(UTC))


@contextmanager
def bundling(config: TrainConfig, run_id: str, echo: Printer, launch: Launch | None = None,
             dsn: str | None = None) -> Iterator[None]:
    """Run the body (the training); when it raises, write the bundle, say where, re-raise."""
    started = datetime.now(UTC)
    try:
        yield
    except Exception as error:
        if config.crash.enabled:
            uri = _bundle_quietly(Crash(config, run_id, error, launch, dsn, started))
            if uri is not None:
                echo(f"crash bundle: {uri}\n  see `gkr bundle {run_id}`; let an agent "
                     f"diagnose it: `gkr diagnose {run_id}`")
        raise


def _bundle_quietly(crash: Crash) -> str | None:
    try:
        return write_bundle(crash)
    except Exception as failure:  # e.g. no thread to be had: the run's error goes first
        log.warning("crash bundle of run %s not written: %s", crash.run_id, failure)
        return None


def write_bundle(crash: Crash) -> str | None:
    """Write the bundle within `crash.timeout_s`; its URI, or None when it did not finish."""
    section = crash.config.crash
    done: list[str] = []

    def work() -> None:
        try:
            done.append(_Bundle(crash).write())
        except Exception as error:  # e.g. the folder cannot be made: logged, never raised
            log.warning("crash bundle of run %s not written: %s", crash.run_id, error)

    thread = threading.Thread(target=work, name="gkr-crash-bundle", daemon=True)
    thread.start()
    thread.join(section.timeout_s)
    if thread.is_alive():
        log.warning("crash bundle of run %s: not finished after %.0f s (crash.timeout_s); "
                    "going on without it", crash.run_id, section.timeout_s)
        return None
    return done[0] if done else None


class _Bundle:
    """One bundle being written: its parts within the size budget, and what went wrong."""

    def __init__(self, crash: Crash) -> None:
        self.crash, self.config = crash, crash.config
        self.folder = Folder(bundle_uri(crash.config, crash.run_id))
        self.left = crash.config.crash.max_bytes
        self.parts: dict[str, int] = {}
        self.left_out: dict[str, str] = {}
        self.redacted: dict[str, int] = {}
        self.problems: list[str] = []
        self.clock = time.monotonic()

    def write(self) -> str:
        """Every part, then the manifest; the bundle's URI."""
        manifest: dict[str, Any] = {}
        for name, part in (("failure", self._failure), ("config", self._config),
                           ("code", self._code), ("logs", self._logs),
                           ("queries", self._queries), ("events", self._events),
                           ("checkpoint", self._checkpoint)):
            try:
                manifest[name] = part()
            except Exception as error:  # one part's failure leaves the others
                self.problems.append(f"{name}: {type(error).__name__}: {error}")
                log.warning("crash bundle: %s not recorded: %s", name, error)
        self._manifest(manifest)
        self._announce()
        return self.folder.uri

    # --- writing within the budget --------------------------------------------------------

    def put(self, name: str, data: bytes, cut: bool = False) -> bool:
        """Write a part, its secrets redacted, if it fits what is left (a text `cut` to fit
        keeps its end)."""
        data = self._clean(name, data)
        if len(data) > self.left:
            if not cut or self.left < 1024:
                self.left_out[name] = f"{len(data)} bytes: over crash.max_bytes"
                return False
            data = b"[... cut to fit crash.max_bytes ...]\n" + data[-(self.left - 64):]
        self.folder.write(name, data)
        self.left -= len(data)
        self.parts[name] = len(data)
        return True

    def _clean(self, name: str, data: bytes) -> bytes:
        done = redact(data, name)
        if done.count:
            self.redacted[name] = self.redacted.get(name, 0) + done.count
        return done.data

    def put_json(self, name: str, data: Any) -> bool:
        return self.put(name, json.dumps(data, indent=1, default=str).encode())

    # --- the parts ------------------------------------------------------------------------

    def _failure(self) -> dict[str, Any]:
        """Ray Train's view of the failure, beside the reports the failed ranks wrote."""
        reports = self._rank_reports()
        by_rank = {body["identity"].get("rank"): name for name, body in reports
                   if body["identity"].get("replica_group", -1) < 0}
        ranks = [entry | {"report": by_rank[entry["rank"]]} if entry["rank"] in by_rank
                 else entry for entry in rank_failures(self.crash.error)]
        own = [f"{name.removeprefix('ranks/').removesuffix('.json').replace('-', ' ')}: "
               f"{body['exception']['message'].splitlines()[0]}"
               for name, body in reports if body["exception"]["message"]]
        self.put_json("failure.json", {
            "run": self.crash.run_id, "time": datetime.now(UTC).isoformat(),
            "error": exception_record(self.crash.error), "ranks": ranks})
        return {"summary": own[0] if own else summary(self.crash.error), "ranks": ranks,
                "reports": [name for name, _ in reports],
                "flight_recorder": [n for n in self.folder.names()
                                    if n.startswith("flight_recorder/")]}

    def _rank_reports(self) -> list[tuple[str, dict[str, Any]]]:
        """The reports the ranks wrote themselves, lowest replica group and rank first."""
        found = []
        for name in self.folder.names():
            if name.startswith("ranks/") and name.endswith(".json"):
                body = json.loads(self.folder.read(name))
                who = body.get("identity", {})
                found.append(((who.get("replica_group", -1), who.get("rank", -1)), name, body))
        return [(name, body) for _, name, body in sorted(found, key=lambda item: item[0])]

    def _config(self) -> dict[str, Any]:
        resolved = redacted(self.config.model_dump(mode="json"))
        self.put("config/resolved.yaml", yaml.safe_dump(resolved, sort_keys=False).encode())
        launch = self.crash.launch
        if launch is None:
            return {"launch": None}
        self.put_json("config/launch.json", launch.as_dict())
        for name, path in (("config/" + Path(launch.config).name, launch.config),
                           ("job/spec.yaml", launch.spec), ("job/manifest.yaml", launch.manifest)):
            if path and Path(path).is_file():
                self.put(name, Path(path).read_bytes()[:TEXT_BOUND])
        return {"launch": launch.as_dict()}

    def _code(self) -> dict[str, Any]:
        launch = self.crash.launch
        folder = Path(launch.config).parent if launch else Path.cwd()
        code, diff = identify(folder, _working_dir())
        if diff:  # the digest is of the patch as stored: `gkr diagnose` checks it
            diff = self._clean("code/changes.patch", diff)
            code = replace(code, changes_sha256=hashlib.sha256(diff).hexdigest(),
                           changes_bytes=len(diff))
        if "code/changes.patch" in self.redacted:
            self.problems.append("code: secrets redacted from the uncommitted changes; the "
                                 "patch may not apply where they were")
        self.put_json("code/identity.json", code.as_dict())
        if diff and not self.put("code/changes.patch", diff):
            self.problems.append("code: the uncommitted changes exceed crash.max_bytes; only "
                                 "their hash is recorded")
        return code.as_dict()

    def _logs(self) -> list[str]:
        folder, job = logs.session_logs(), _job_id()
        if folder is None or not job:
            return []
        lines, written = self.config.crash.log_lines, []
        for worker in logs.run_workers(folder, self.crash.run_id, job):
            for path in worker.files:
                name, text = f"logs/{worker.name}{path.suffix}", logs.tail(path, lines,
                                                                           LOG_FILE_BYTES)
                if text and self.put(name, text, cut=True):
                    written.append(name)
        return written

    def _queries(self) -> list[dict[str, Any]]:
        listed = queries.listed(self.crash.run_id)
        for query in listed:
            self.put(query["file"], queries.sql(query["name"]).encode())
        self.put_json("telemetry/queries.json", listed)
        return listed

    def _events(self) -> int:
        if self.crash.dsn is None:
            return 0
        rows = run_events(self.crash.dsn, self.crash.run_id, self.config.crash.timeout_s / 4)
        self.put_json("events.json", rows)
        return len(rows)

    def _checkpoint(self) -> dict[str, Any] | None:
        section = self.config.checkpoint
        if section is None or not section.enabled:
            return None
        from runtime.checkpoint.storage import CheckpointStore

        store = CheckpointStore(section.uri)
        latest, own = store.latest(), store.latest_of(self.crash.run_id)
        return {"uri": section.uri, "latest_step": latest, "run_step": own,
                "latest_uri": store.step_uri(latest) if latest is not None else None}

    def _manifest(self, parts: dict[str, Any]) -> None:
        from runtime.telemetry.identity import identity

        body = {
            "version": VERSION, "run": self.crash.run_id, "run_name": self.config.run.name,
            "uri": self.folder.uri, "started": self.crash.started.isoformat(),
            "created": datetime.now(UTC).isoformat(),
            "identity": identity(self.crash.run_id, Role.HEAD).row(),
            "telemetry": _telemetry(self.crash.dsn), **parts,
            "files": self.parts, "left_out": self.left_out, "redacted": self.redacted,
            "problems": self.problems, "elapsed_s": round(time.monotonic() - self.clock, 3),
        }
        text = json.dumps(body, indent=1, default=str).encode()
        self.folder.write(MANIFEST, redact(text, MANIFEST).data)

    def _announce(self) -> None:
        """The CrashBundle event, so that `gkr runs` and `gkr bundle` find the bundle."""
        if self.crash.dsn is None:
            return
        try:
            record_event(self.crash.dsn, self.crash.run_id, "CrashBundle", self.folder.uri)
        except Exception as error:  # the bundle is written: only the pointer to it is lost
            log.warning("crash bundle: no CrashBundle event: %s", error)


# --- the failure as Ray Train reports it ----------------------------------------------------

def exception_record(error: BaseException) -> dict[str, str]:
    """Type, message and whole traceback (with its causes) of an exception."""
    return {"type": f"{type(error).__module__}.{type(error).__qualname__}",
            "message": str(error)[:TEXT_BOUND],
            "traceback": "".join(traceback.format_exception(error))[-TEXT_BOUND:]}


def _worker_failures(error: BaseException) -> dict[int, BaseException]:
    """Ray Train's failures by rank (`WorkerGroupError.worker_failures`), found on the error
    or one of its causes (the driver wraps Ray's error in its own)."""
    seen: BaseException | None = error
    while seen is not None:
        found = getattr(seen, "worker_failures", None)
        if isinstance(found, dict):
            return {int(rank): failure for rank, failure in found.items()}
        seen = seen.__cause__ or seen.__context__
    return {}


def rank_failures(error: BaseException) -> list[dict[str, Any]]:
    """Each failed rank: what it raised, or that its process died (with the pid and the log
    Ray named for it)."""
    return [_rank_failure(rank, failure)
            for rank, failure in sorted(_worker_failures(error).items())]


def _rank_failure(rank: int, failure: BaseException) -> dict[str, Any]:
    text = str(failure)
    died = "died unexpectedly" in text or "process has died" in text
    entry: dict[str, Any] = {"rank": rank, "type": type(failure).__qualname__,
                             "message": text[:TEXT_BOUND], "how": "died" if died else "failed"}
    pid, path = _PID.search(text), _RAY_LOG.search(text)
    if died and pid:
        entry["pid"] = int(pid.group(1))
    if died and path:
        entry["ray_log"] = path.group(1)
    return entry


def summary(error: BaseException) -> str:
    """One line: a rank's own runtime error when there is one, else the first failed rank's,
    else the error's first line."""
    failures = sorted(_worker_failures(error).items())
    chosen = next(((rank, f) for rank, f in failures if isinstance(f, RuntimeFailure)),
                  failures[0] if failures else None)
    if chosen is not None:
        rank, failure = chosen
        first = (str(failure).strip().splitlines() or [""])[0]
        return f"rank {rank}: {first or type(failure).__name__}"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- secrets, Ray and telemetry -------------------------------------------------------------

def redacted(config: dict[str, Any]) -> dict[str, Any]:
    """The resolved config without a password in the telemetry DSN."""
    from runtime.telemetry.store import describe

    telemetry = dict(config.get("telemetry") or {})
    if telemetry.get("dsn"):
        telemetry["dsn"] = describe(str(telemetry["dsn"]))
    return {**config, "telemetry": telemetry} if telemetry else config


def _telemetry(dsn: str | None) -> dict[str, Any] | None:
    from runtime.telemetry.store import describe, embedded

    return None if dsn is None else {"dsn": describe(dsn), "embedded": embedded(dsn)}


def _job_id() -> str:
    try:
        import ray

        if not ray.is_initialized():  # asking the runtime context would start a Ray
            return ""
        return str(ray.get_runtime_context().get_job_id() or "")
    except Exception:  # Ray not connected
        return ""


def _working_dir() -> str:
    """The archive Ray unpacked as the working directory (`gkr submit --working-dir`)."""
    try:
        import ray

        if not ray.is_initialized():
            return ""
        return str((ray.get_runtime_context().runtime_env or {}).get("working_dir") or "")
    except Exception:  # Ray not connected, or no runtime_env
        return ""


def run_events(dsn: str, run_id: str, timeout_s: float) -> list[dict[str, Any]]:
    """The events around the run, read through its store holder when the store is embedded."""
    from runtime.telemetry.sink import actor_name
    from runtime.telemetry.store import Rows, Store, embedded

    parameters = {"run": run_id, "limit": EVENT_ROWS}
    text = queries.sql("run_events")
    if embedded(dsn):
        import ray

        actor: Any = ray.get_actor(actor_name(run_id))
        rows: Rows = ray.get(actor.query.remote(text, parameters), timeout=timeout_s)
    else:
        with Store.connect(dsn, migrate=False) as store:
            rows = store.query(text, parameters)
    return rows.dicts()


def record_event(dsn: str, run_id: str, reason: str, message: str) -> None:
    """One driver event of the run, through the run's sink (its store holder when embedded)."""
    from runtime.telemetry.identity import identity
    from runtime.telemetry.sink import sink_for
    from runtime.telemetry.writer import TelemetryWriter

    writer = TelemetryWriter(sink_for(run_id, dsn), identity(run_id, Role.HEAD))
    writer.write("events", {"source": "driver", "object_kind": "Run", "object_name": run_id,
                            "reason": reason, "severity": "Warning", "message": message,
                            "count": 1})
    writer.close(timeout_s=10.0)
