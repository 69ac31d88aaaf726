"""The cluster side of telemetry (seed §8): each overlay's ClickHouseInstallation, sharded and
replicated as the catalog says, and the ClickHouseKeeperInstallation its replicas need, both
reconciled by the clickhouse-operator add-on; and the Helm values that make the Fluent Bit
add-on ship NCCL Inspector dumps and the sample ledger's files (issue 24) from the GPU nodes
into it. The runtime turns its schema into the cluster's replicated and Distributed tables
(runtime/telemetry/cluster_schema.py); the users' profiles carry the settings that make its
queries right there.

The facts both ends share (node folder, table, port, users) come from generator.telemetry,
the same module the job pods are planned from, so the folder Fluent Bit tails is the one the
pods write.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

from generator.catalog import Cluster
from generator.manifests import render_documents
from generator.platform.context import PlatformContext
from generator.platform.overlay import platform_dir
from generator.telemetry import (
    CLUSTER,
    DATABASE,
    DUMP_VOLUME,
    HTTP_PORT,
    INGEST_USER,
    LEDGER_SUBFOLDER,
    READER_USER,
    Telemetry,
    insert_uri,
)
from runtime.telemetry.cluster_schema import QUERY_SETTINGS

SOURCE = "platform/catalog/gke.yaml (telemetry)"
READER_PROFILE = "reader"
# Ingest writes rows and runs the runtime's schema migrations (runtime/telemetry/schema), which
# create the database, tables and views, add columns and change a view's query, on every node
# (ON CLUSTER needs the CLUSTER grant); `gkr telemetry ingest` stages files in temporary
# tables. The reader only reads. Both read the `{cluster}` macro, which says the store is a
# cluster (runtime/telemetry/store.py), where system tables may need a grant
# (select_from_system_db_requires_grant).
MACROS = "GRANT SELECT ON system.macros"
GRANTS = {
    INGEST_USER: [f"GRANT SELECT, INSERT, CREATE DATABASE, CREATE TABLE, CREATE VIEW, "
                  f"ALTER ADD COLUMN, ALTER VIEW MODIFY QUERY ON {DATABASE}.*",
                  "GRANT CREATE TEMPORARY TABLE, CLUSTER ON *.*", MACROS],
    READER_USER: [f"GRANT SELECT ON {DATABASE}.*", MACROS],
}
# The reader (gkr ui, `gkr telemetry sql`, the diagnosis agent's skill) is read-only in the
# server: readonly = 1 allows read queries only, no SET and no CREATE TEMPORARY TABLE, which
# table functions need (https://clickhouse.com/docs/operations/settings/permissions-for-queries;
# 2 would allow both); its grants hold no FILE, URL or other source besides. clickhouse-connect
# sends no setting a read-only user cannot change. The operator writes `spec.configuration.
# profiles` as users.d XML, `<profile>/<setting>: value` (shared/reference/crds/clickhouse,
# clickhouseinstallations.yaml: profiles, x-kubernetes-preserve-unknown-fields).
# Both profiles also carry the cluster's query settings (runtime/telemetry/cluster_schema.py).
PROFILES = {f"{READER_PROFILE}/readonly": 1,
            **{f"{profile}/{name}": value for profile in ("default", READER_PROFILE)
               for name, value in QUERY_SETTINGS.items()}}
KEEPER_PORT = 2181  # set on Keeper (keeper_server/tcp_port) and named in the installation
TAG = "nccl.inspector"
PATH_KEY = "file"  # the tailed file's path, parsed into namespace and job, then dropped
PATH_PARSER = "gkr_dump_path"
PASSWORD_ENV, NODE_ENV = "CLICKHOUSE_PASSWORD", "NODE_NAME"  # Fluent Bit's own variables
# Tail offsets survive restarts in the chart's writable mount of the node's /var/log, so a
# restarted Fluent Bit neither re-sends nor skips lines.
OFFSETS_DB = "/var/log/fluent-bit-nccl-inspector.db"
# The sample ledger: one JSON line per rank and committed step, whose keys are the columns of
# the runtime's raw table (runtime/telemetry/ledger_store.py RAW_TABLE, schema/0008; a test
# checks they agree), posted as JSONEachRow; the identity Fluent Bit adds lands in its
# identity columns. Tail only emits whole lines, so a partial last line is never sent.
LEDGER_TAG = "sample.ledger"
LEDGER_RAW_TABLE = "sample_ledger_raw"
LEDGER_PATH_PARSER = "gkr_ledger_path"
LEDGER_OFFSETS_DB = "/var/log/fluent-bit-sample-ledger.db"

Section = tuple[str, list[tuple[str, str]]]


def produce_telemetry(ctx: PlatformContext) -> None:
    """`<overlay>/platform/telemetry.yaml`: the telemetry namespace and ClickHouseInstallation."""
    telemetry = ctx.catalog.platform.telemetry
    for cluster in ctx.catalog.clusters.values():
        documents = installation(telemetry, [ctx.addons.terraform.pod_cidr])
        ctx.add(f"{platform_dir(cluster)}/telemetry.yaml", documents, SOURCE)


def installation(telemetry: Telemetry, networks: list[str]) -> list[dict[str, Any]]:
    """The namespace, Keeper, and the ClickHouseInstallation of `telemetry.shards` shards of
    `telemetry.replicas` replicas, each on its PVC. No TTL here: retention belongs to the
    runtime's tables."""
    return render_documents("platform/telemetry.yaml.j2", telemetry=telemetry,
                            users=users(telemetry, networks), profiles=PROFILES,
                            cluster=CLUSTER, keeper_port=KEEPER_PORT)


def users(telemetry: Telemetry, networks: list[str]) -> dict[str, Any]:
    """The operator's flat user settings: passwords read from the Secret, never written here;
    logins only from the cluster's pods."""
    keys = {INGEST_USER: telemetry.ingest_key, READER_USER: telemetry.reader_key}
    profiles = {INGEST_USER: "default", READER_USER: READER_PROFILE}
    settings: dict[str, Any] = {}
    for user, key in keys.items():
        settings |= {f"{user}/k8s_secret_password": f"{telemetry.secret}/{key}",
                     f"{user}/networks/ip": networks, f"{user}/profile": profiles[user],
                     f"{user}/grants/query": GRANTS[user]}
    return settings


def fluent_bit_values(ctx: PlatformContext, cluster: Cluster) -> dict[str, Any]:
    """Helm values of the Fluent Bit chart on one cluster: on its GPU nodes, tail the jobs'
    NCCL Inspector files and post them to ClickHouse (reference/telemetry.md §3)."""
    telemetry = ctx.catalog.platform.telemetry
    accelerators = sorted({a.gke_accelerator for a in ctx.offered(cluster).values()})
    sections = fluent_bit_sections(telemetry, cluster)
    password = {"name": telemetry.secret, "key": telemetry.ingest_key}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": ctx.catalog.platform.labels["accelerator"], "operator": "In",
                "values": accelerators}]}]}}},
        "env": [{"name": PASSWORD_ENV, "valueFrom": {"secretKeyRef": password}},
                {"name": NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "extraVolumes": [{"name": DUMP_VOLUME, "hostPath": {"path": telemetry.node_dir,
                                                            "type": "DirectoryOrCreate"}}],
        "extraVolumeMounts": [{"name": DUMP_VOLUME, "mountPath": telemetry.node_dir,
                               "readOnly": True}],
        "config": {key: classic(value) for key, value in sections.items()},
    }


def fluent_bit_sections(telemetry: Telemetry, cluster: Cluster) -> dict[str, list[Section]]:
    """The chart's config parts as data: tail every job's NCCL Inspector files and ledger
    files, name the job, its team, cluster and node in each record, and post the records as
    NDJSON, one row each, to each one's table."""
    streams = [(TAG, ",".join(telemetry.tail_globs), OFFSETS_DB, PATH_PARSER,
                telemetry.path_regex, insert_uri()),
               (LEDGER_TAG, ledger_glob(telemetry), LEDGER_OFFSETS_DB, LEDGER_PATH_PARSER,
                ledger_path_regex(telemetry), ledger_insert_uri())]
    sections: dict[str, list[Section]] = {"inputs": [], "filters": [], "outputs": [],
                                          "customParsers": []}
    for tag, path, offsets, parser, regex, uri in streams:
        sections["inputs"].append(("INPUT", _tail(tag, path, offsets)))
        sections["filters"] += _naming(tag, parser, cluster)
        sections["outputs"].append(("OUTPUT", _post(telemetry, tag, uri)))
        sections["customParsers"].append(("PARSER", [("Name", parser), ("Format", "regex"),
                                                     ("Regex", regex)]))
    return sections


def _tail(tag: str, path: str, offsets: str) -> list[tuple[str, str]]:
    return [("Name", "tail"), ("Tag", tag), ("Path", path), ("Path_Key", PATH_KEY),
            ("Parser", "json"), ("DB", offsets), ("Read_from_Head", "On"),
            ("Buffer_Max_Size", "1MB"), ("Mem_Buf_Limit", "64MB")]


def _naming(tag: str, parser: str, cluster: Cluster) -> list[Section]:
    """The file's path parsed into namespace, job and run; the cluster, node and team added."""
    parse_path = [("Name", "parser"), ("Match", tag), ("Key_Name", PATH_KEY),
                  ("Parser", parser), ("Reserve_Data", "On")]
    identity = [("Name", "modify"), ("Match", tag), ("Add", f"cluster {cluster.name}"),
                ("Add", f"node ${{{NODE_ENV}}}")]
    teams = [("FILTER", [("Name", "modify"), ("Match", tag),
                         ("Condition", f"Key_value_equals namespace {team.namespace}"),
                         ("Add", f"team {name}")]) for name, team in sorted(cluster.teams.items())]
    return [("FILTER", parse_path), ("FILTER", identity), *teams]


def _post(telemetry: Telemetry, tag: str, uri: str) -> list[tuple[str, str]]:
    # The files stay on the node, so retrying without limit loses nothing while ClickHouse
    # is away: the tail pauses when the memory buffer is full.
    return [("Name", "http"), ("Match", tag), ("Host", telemetry.service_host),
            ("Port", str(HTTP_PORT)), ("URI", uri), ("Format", "json_lines"),
            ("Json_date_key", "false"), ("Http_User", INGEST_USER),
            ("Http_Passwd", f"${{{PASSWORD_ENV}}}"), ("Retry_Limit", "no_limits")]


def ledger_glob(telemetry: Telemetry) -> str:
    """Every job's ledger files on a node: `<job folder>/ledger/<run>/<incarnation>.jsonl`
    (GKR_LEDGER_DIR in the pods, generator.telemetry)."""
    return f"{telemetry.node_dir}/*/*/{LEDGER_SUBFOLDER}/*/*.jsonl"


def ledger_path_regex(telemetry: Telemetry) -> str:
    """Namespace, job and run from a ledger file's path (a Fluent Bit regex parser)."""
    return (rf"^{re.escape(telemetry.node_dir)}/(?<namespace>[^/]+)/(?<job>[^/]+)/"
            rf"{LEDGER_SUBFOLDER}/(?<run>[^/]+)/[^/]+\.jsonl$")


def ledger_insert_uri() -> str:
    """The request path inserting ledger lines, a row each; keys a line has beyond the
    table's (the tail's own) are skipped, as ClickHouse's JSONEachRow setting says."""
    return "/?" + urlencode({
        "query": f"INSERT INTO {DATABASE}.{LEDGER_RAW_TABLE} FORMAT JSONEachRow",
        "input_format_skip_unknown_fields": "1"})


def classic(sections: list[Section]) -> str:
    """Fluent Bit's classic configuration format: `[SECTION]`, then indented `Key value`
    lines. Every value is one line by construction (catalog names and paths are patterned)."""
    lines = []
    for name, entries in sections:
        lines += [f"[{name}]", *(f"    {key} {value}" for key, value in entries)]
    return "\n".join(lines) + "\n"
