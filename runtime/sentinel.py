"""The sentinel of a persistent RayCluster (seed §4.3): `python -m runtime.sentinel
--dashboard http://HEAD:8265 --name NAME [--owner EMAIL] [--idle-after SECONDS]`.

It runs as a one-replica Deployment beside the cluster and asks the Ray head's own API, on
its dashboard port, what a port probe cannot tell: is the GCS alive (`/api/gcs_healthz`, which
calls the GCS; a wedged GCS still accepts TCP connections), which nodes are alive
(`/api/v0/nodes`), which jobs are pending or running (`/api/jobs/`). Each probe's answer is a
`HeadReport`; the sentinel prints it as one JSON line when it changes and every
`report_every_s`, and `gkr status NAME` shows the latest (generator.cluster.status); each
change of state is also a row of the telemetry store's `events` (GKR_TELEMETRY_DSN, as every
GKR pod has it), which gkr-ui lists.

A cluster with no job pending or running for `idle_after_s` (the cluster catalog's
`raycluster_idle_after`) holds its capacity for nothing: the report says so, and the sentinel
says it once to the owner in its log, with the command that frees it. After `failures`
consecutive unhealthy probes it exits non-zero, so Kubernetes restarts it and `gkr status`
shows the restarts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.config_errors import config_error
from runtime.errors import ConfigError
from runtime.identity import Env, Identity, Role
from runtime.telemetry.writer import StoreSink, TelemetryWriter

log = logging.getLogger("gkr.sentinel")

REPORT_KEY = "sentinel"  # the key that marks a report line in the sentinel's log
SUMMARY = "summary"  # the report in words, in that line
SOURCE = "sentinel"  # the `source` of its rows in the telemetry store's events
EVENTS = "events"  # that table (runtime/telemetry/schema)
ACTIVE = {"PENDING", "RUNNING"}


class SentinelConfig(BaseModel):
    """How the sentinel asks the Ray head, and when it speaks."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    dashboard: str = Field(pattern=r"^https?://[^/\s]+$")
    """The head's dashboard, http://HOST:PORT (Ray's HTTP API: health, nodes, jobs)."""
    name: str = ""
    """The RayCluster watched, for the report and the owner's notice."""
    owner: str = ""
    """E-mail of the RayCluster's owner, named in the idle notice."""
    interval_s: float = Field(10.0, gt=0)
    """Seconds between probes."""
    timeout_s: float = Field(5.0, gt=0)
    """Seconds one API request may take."""
    failures: int = Field(6, ge=1)
    """Consecutive unhealthy probes after which the sentinel exits non-zero."""
    idle_after_s: float | None = Field(None, gt=0)
    """No job pending or running this long: capacity held for nothing (None: never said)."""
    report_every_s: float = Field(300.0, gt=0)
    """A report line at least this often, changed or not."""
    max_probes: int | None = Field(None, ge=1)
    """Stop after this many probes with exit 0 (None: run until failure)."""


@dataclass(frozen=True)
class HeadReport:
    """What the head's API said at one probe."""

    healthy: bool
    reason: str = ""
    """Why not healthy: the GCS health check's answer, or the dashboard's silence."""
    nodes_alive: int = 0
    nodes_dead: int = 0
    jobs_active: int = 0
    """Jobs pending or running (submitted, or interactive drivers)."""
    jobs_total: int = 0
    idle_s: float | None = None
    """Seconds since a job was last pending or running (None while one is)."""
    idle_past: bool = False
    """Idle past `idle_after_s`."""

    def summary(self) -> str:
        """The report in words, as `gkr status` and gkr-ui's events show it."""
        if not self.healthy:
            return f"UNHEALTHY: {self.reason}"
        said = (f"healthy: {self.nodes_alive} nodes alive, {self.nodes_dead} dead, "
                f"{self.jobs_active} of {self.jobs_total} jobs pending or running")
        if self.idle_s is not None:
            said += f", no job for {_duration(self.idle_s)}"
        if self.idle_past:
            said += " (past the catalog's raycluster_idle_after: capacity held for nothing)"
        return said

    def line(self, config: SentinelConfig, at: float) -> str:
        """The report as the JSON line `gkr status` reads."""
        stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json.dumps({REPORT_KEY: config.name, "time": stamp, **asdict(self),
                           SUMMARY: self.summary()})

    def event(self, config: SentinelConfig) -> dict[str, Any]:
        """The report as a row of the telemetry store's `events` (gkr-ui lists them)."""
        reason = ("RayClusterUnhealthy" if not self.healthy else
                  "RayClusterIdle" if self.idle_past else "RayClusterHealthy")
        return {"source": SOURCE, "object_kind": "RayCluster", "object_name": config.name,
                "reason": reason, "severity": "Normal" if reason == "RayClusterHealthy"
                else "Warning", "message": self.summary(), "count": 1}


def last_report(lines: list[str]) -> dict[str, Any] | None:
    """The latest report line of a sentinel's log (what `gkr status` shows), as data."""
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and REPORT_KEY in data:
            fields = {k: v for k, v in data.items() if k not in (REPORT_KEY, "time", SUMMARY)}
            try:
                HeadReport(**fields)  # a line of this version's shape, not a look-alike
            except TypeError:
                continue
            return data
    return None


def _get(config: SentinelConfig, path: str) -> Any:
    with urllib.request.urlopen(config.dashboard + path, timeout=config.timeout_s) as answer:
        body = answer.read().decode()
    return json.loads(body) if body[:1] in "[{" else body


def ask_head(config: SentinelConfig) -> HeadReport:
    """One probe: the GCS's health, then the nodes and jobs (idle fields left unset)."""
    try:
        if _get(config, "/api/gcs_healthz") != "success":
            return HeadReport(False, "the GCS health check did not answer success")
        nodes = _get(config, "/api/v0/nodes?limit=10000&detail=false")["data"]["result"]["result"]
        jobs = _get(config, "/api/jobs/")
    except urllib.error.HTTPError as error:
        return HeadReport(False, f"HTTP {error.code} {error.reason} from {error.url}")
    except (OSError, ValueError, KeyError, TypeError) as error:
        return HeadReport(False, f"the head's API at {config.dashboard}: {error}")
    states = [str(node.get("state")) for node in nodes]
    active = [job for job in jobs if job.get("status") in ACTIVE]
    alive = states.count("ALIVE")
    return HeadReport(alive > 0, "" if alive else "no Ray node is alive: the head's raylet is down",
                      nodes_alive=alive, nodes_dead=states.count("DEAD"),
                      jobs_active=len(active), jobs_total=len(jobs))


@dataclass
class _State:
    """What the watch remembers between probes."""

    busy_at: float
    """When a job was last seen pending or running (else when the watch started)."""
    failed: int = 0
    last: HeadReport | None = None
    reported_at: float = float("-inf")
    told_owner: bool = False


def watch(config: SentinelConfig, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.time, emit: Callable[[str], None] = print,
          record: Callable[[HeadReport], None] = lambda _: None) -> int:
    """Probe until `failures` consecutive probes are unhealthy (returns 1) or max_probes ran
    (returns 0); `emit` gets each report line, `record` each change of state."""
    state, probes = _State(busy_at=clock()), 0
    while config.max_probes is None or probes < config.max_probes:
        now = clock()
        report = _with_idle(config, state, ask_head(config), now)
        probes += 1
        state.failed = 0 if report.healthy else state.failed + 1
        _speak(config, state, report, now, emit, record)
        if state.failed >= config.failures:
            log.error("ray head of %s unhealthy for %d consecutive probes (%s); exiting",
                      config.name or config.dashboard, state.failed, report.reason)
            return 1
        sleep(config.interval_s)
    return 0


def _with_idle(config: SentinelConfig, state: _State, report: HeadReport,
               now: float) -> HeadReport:
    """The report with how long the cluster has sat without work (only a healthy head's
    answer counts: a dead one's jobs are unknown)."""
    if not report.healthy:
        return report
    if report.jobs_active:
        state.busy_at, state.told_owner = now, False
        return report
    idle = now - state.busy_at
    past = config.idle_after_s is not None and idle >= config.idle_after_s
    return replace(report, idle_s=round(idle, 1), idle_past=past)


def _speak(config: SentinelConfig, state: _State, report: HeadReport, now: float,
           emit: Callable[[str], None], record: Callable[[HeadReport], None]) -> None:
    """A report line on a change (idle time aside) or when one is due, and the change
    recorded; the owner's notice once per idle spell."""
    settled = replace(report, idle_s=None)
    changed = settled != state.last
    if changed or now - state.reported_at >= config.report_every_s:
        emit(report.line(config, now))
        state.reported_at = now
    if changed:
        record(report)
        state.last = settled
    if report.idle_past and not state.told_owner:
        log.warning("%s", idle_notice(config, report))
        state.told_owner = True


def idle_notice(config: SentinelConfig, report: HeadReport) -> str:
    name = config.name or config.dashboard
    owner = f" ({config.owner})" if config.owner else ""
    return (f"RayCluster {name}{owner} has run no job for {_duration(report.idle_s or 0)}, past "
            f"the catalog's {_duration(config.idle_after_s or 0)}: its capacity is held for "
            f"nothing; `gkr delete {name} --raycluster` frees it")


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def parse_args(argv: list[str]) -> SentinelConfig:
    parser = argparse.ArgumentParser(prog="python -m runtime.sentinel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dashboard", required=True, help="http://HOST:PORT of the head")
    parser.add_argument("--name", default="", help="the RayCluster watched")
    parser.add_argument("--owner", default="", help="its owner's e-mail")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between probes")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    parser.add_argument("--failures", type=int, default=6,
                        help="consecutive unhealthy probes before exiting non-zero")
    parser.add_argument("--idle-after", type=float, default=None,
                        help="seconds without jobs after which the owner is told")
    parser.add_argument("--report-every", type=float, default=300.0,
                        help="seconds between unchanged report lines")
    parser.add_argument("--max-probes", type=int, default=None, help="stop after N probes")
    args = parser.parse_args(argv)
    try:
        return SentinelConfig(dashboard=args.dashboard.rstrip("/"), name=args.name,
                              owner=args.owner, interval_s=args.interval,
                              timeout_s=args.timeout, failures=args.failures,
                              idle_after_s=args.idle_after, report_every_s=args.report_every,
                              max_probes=args.max_probes)
    except ValidationError as error:
        raise config_error(error, "command line", SentinelConfig) from None


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        log.error("%s", error)
        return 2
    store = store_events(os.environ)

    def record(report: HeadReport) -> None:
        if store is not None:
            store.write(EVENTS, report.event(config))

    try:
        return watch(config, emit=lambda line: print(line, flush=True), record=record)
    finally:
        if store is not None:
            store.close()


def store_events(environ: Mapping[str, str]) -> TelemetryWriter | None:
    """The telemetry store its pod names (GKR_TELEMETRY_DSN), where gkr-ui reads events;
    None: the log and `gkr status` only."""
    dsn = environ.get(Env.TELEMETRY_DSN)
    if not dsn:
        return None
    return TelemetryWriter(StoreSink(dsn), Identity.from_env(environ, role=str(Role.SENTINEL)))


if __name__ == "__main__":
    sys.exit(main())
