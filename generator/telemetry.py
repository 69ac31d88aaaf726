"""Collective telemetry of GPU jobs, cluster side (seed §8): where NCCL Inspector and Flight
Recorder dumps land, and how pods and Fluent Bit reach the cluster's ClickHouse.

One source for both ends of the pipe: every GPU job pod mounts its job's folder of the node
folder `Telemetry.node_dir` (generator.pods) and writes its dumps there; Fluent Bit, on the
same nodes, tails exactly `Telemetry.tail_globs` and posts the lines to `RECORDS_TABLE`
(generator.platform.telemetry). The deployment facts are the catalog's
(platform/catalog/gke.yaml, `telemetry`); the facts fixed by the runtime and upstream
projects are the constants below.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, Field, field_validator

from generator.units import Quantity
from runtime.identity import Env
from runtime.telemetry.ledger import LEDGER_DIR

# The runtime's names (runtime/telemetry/store.py DATABASE, runtime/telemetry/inspector_load.py
# TABLE, created by runtime/telemetry/schema/0009_nccl_records.sql); a test checks they agree.
DATABASE: Final = "telemetry"
RECORDS_TABLE: Final = "nccl_records"  # a record per row, typed by ClickHouse's JSON reader
HTTP_PORT: Final = 8123  # ClickHouse's HTTP interface (reference/telemetry.md §5)
CLUSTER: Final = "main"  # the installation's cluster; the operator sets it as `{cluster}`
INGEST_USER: Final = "ingest"  # writes rows (Fluent Bit, job pods) and runs the migrations
READER_USER: Final = "reader"  # reads only (gkr ui, Grafana, agents)
# The job's folder in every GPU pod; Flight Recorder dumps go to its `fr/` subfolder.
POD_DUMP_DIR: Final = "/gkr/telemetry"
FR_SUBFOLDER: Final = "fr"
# The sample ledger's files (runtime/telemetry/ledger.py): <run>/<incarnation>.jsonl in the
# job's `ledger/` subfolder, on the node with the other dumps, so they outlive the pod.
LEDGER_SUBFOLDER: Final = "ledger"
DUMP_VOLUME: Final = "gkr-telemetry"

# NCCL Inspector, NVIDIA/nccl plugins/profiler/inspector/README.md (reference/telemetry.md
# §1): the profiler plugin, switched on, writing its NDJSON every 30 s rather than only at
# communicator teardown (the default), so that a hung or killed job still leaves its records.
NCCL_PROFILER_PLUGIN: Final = "NCCL_PROFILER_PLUGIN"
NCCL_INSPECTOR_ENABLE: Final = "NCCL_INSPECTOR_ENABLE"
NCCL_INSPECTOR_DUMP_DIR: Final = "NCCL_INSPECTOR_DUMP_DIR"
NCCL_INSPECTOR_INTERVAL: Final = "NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS"
INSPECTOR_INTERVAL_US: Final = 30_000_000
# PyTorch Flight Recorder, torch/csrc/distributed/c10d/FlightRecorder.hpp and
# ProcessGroupNCCL.hpp (reference/telemetry.md §2): a ring of 2000 entries (torch 2.13's
# default, set so that it does not depend on the torch version), dumped per rank to
# `<prefix><rank>` on a watchdog timeout, with durations (which need NCCL timing events).
FR_ENV: Final = {
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_FR_DUMP_TEMP_FILE": f"{POD_DUMP_DIR}/{FR_SUBFOLDER}/rank_",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_ENABLE_TIMING": "1",
}


class Telemetry(BaseModel):
    """Where a cluster's telemetry goes: the `telemetry` section of platform/catalog/gke.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    namespace: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    """Namespace of the ClickHouseInstallation."""
    installation: str = Field(pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    """Name of the ClickHouseInstallation; the operator names its Service clickhouse-<name>."""
    image: str = Field(pattern=r"^[a-z0-9./-]+:[A-Za-z0-9._-]+$")
    """ClickHouse server image, tag pinned: the schema's SQL needs a recent server."""
    shards: int = Field(ge=1, le=64)
    """Shards of the cluster; a run's rows all live on one (the tables are sharded by run)."""
    replicas: int = Field(ge=1, le=5)
    """Replicas of each shard, kept in step through ClickHouse Keeper."""
    storage: Quantity
    """Size of each replica's data volume."""
    keeper_image: str = Field(pattern=r"^[a-z0-9./-]+:[A-Za-z0-9._-]+$")
    """ClickHouse Keeper image, tag pinned."""
    keeper_replicas: int = Field(ge=1, le=7)
    """ClickHouse Keeper's nodes: an odd number, a Raft quorum (3 survive the loss of one)."""
    keeper_storage: Quantity
    """Size of each Keeper node's volume (its logs and snapshots)."""
    node_dir: str = Field(pattern=r"^(/[-_.a-zA-Z0-9]+)+$")
    """Folder on every GPU node holding one subfolder per job, <namespace>/<job>."""
    secret: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """Secret holding the ClickHouse passwords, in the telemetry namespace, the Fluent Bit
    add-on's namespace and every team namespace; created outside Git."""
    ingest_key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$")
    """Key of the ingest user's password in that Secret."""
    reader_key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$")
    """Key of the reader user's password in that Secret."""

    @field_validator("keeper_replicas")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(f"{value} Keeper nodes: use an odd number (1, 3, 5 or 7); Raft "
                             "needs a majority, which an even count does not make sturdier")
        return value

    @property
    def keeper_host(self) -> str:
        """The in-cluster host of Keeper's Service (the operator names it keeper-<name>)."""
        return f"keeper-{self.installation}.{self.namespace}.svc"

    @property
    def service_host(self) -> str:
        """The in-cluster host of ClickHouse's Service (the operator's naming)."""
        return f"clickhouse-{self.installation}.{self.namespace}.svc"

    def dsn(self) -> str:
        """GKR_TELEMETRY_DSN of a pod: the ingest user on the telemetry database. The password
        is the pod's secret variable, which Kubernetes substitutes for `$(NAME)` when the
        container starts; the manifest itself never holds it."""
        auth = f"{INGEST_USER}:$({Env.TELEMETRY_PASSWORD})"
        return f"http://{auth}@{self.service_host}:{HTTP_PORT}/{DATABASE}"

    def job_subfolder(self, namespace: str, job: str) -> str:
        """A job's folder, relative to `node_dir`: its path tells Fluent Bit whose dumps
        they are."""
        return f"{namespace}/{job}"

    @property
    def tail_globs(self) -> tuple[str, ...]:
        """The NCCL Inspector files (`<hostname>-pid<PID>.log`) of every job on a node: in
        the run's subfolder, where the runtime routes them
        (`runtime.train.telemetry.route_inspector_dumps`), or in the job's folder itself."""
        return f"{self.node_dir}/*/*/*.log", f"{self.node_dir}/*/*/*/*.log"

    @property
    def path_regex(self) -> str:
        """Recovers namespace, job and (when present) run from a tailed file's path (a Fluent
        Bit regex parser)."""
        return (rf"^{re.escape(self.node_dir)}/(?<namespace>[^/]+)/(?<job>[^/]+)/"
                r"(?:(?<run>[^/]+)/)?[^/]+\.log$")


# How the records table's reader takes the nodes' lines: keys the table does not name (Fluent
# Bit's own, a verbose record's traces) are skipped, and so is a line the reader cannot type
# (none the plugin writes): Fluent Bit retries a refused request without limit, so one such
# line would stop the node's records, where the string path of schema/0002 took it as a row of
# defaults and left it out.
RECORDS_INSERT_SETTINGS: Final = {"input_format_skip_unknown_fields": "1",
                                  "input_format_allow_errors_ratio": "1"}


def insert_uri() -> str:
    """The HTTP request path that inserts NDJSON lines, one typed row each, into the records
    table: its reader parses each line once, into the record's typed columns."""
    return "/?" + urlencode({
        "query": f"INSERT INTO {DATABASE}.{RECORDS_TABLE} FORMAT JSONEachRow",
        **RECORDS_INSERT_SETTINGS})


def collective_env(plugin: str | None) -> dict[str, str]:
    """What a GPU pod needs to record its collectives: the Flight Recorder always, the NCCL
    Inspector where the accelerator catalog names its plugin; and where its ranks keep the
    sample ledger."""
    inspector = {
        NCCL_PROFILER_PLUGIN: plugin,
        NCCL_INSPECTOR_ENABLE: "1",
        NCCL_INSPECTOR_INTERVAL: str(INSPECTOR_INTERVAL_US),
        NCCL_INSPECTOR_DUMP_DIR: POD_DUMP_DIR,
    } if plugin else {}
    return {**inspector, **FR_ENV, LEDGER_DIR: f"{POD_DUMP_DIR}/{LEDGER_SUBFOLDER}"}
