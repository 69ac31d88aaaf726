"""The cluster side of telemetry (seed §8): each overlay's ClickHouseInstallation, reconciled
by the clickhouse-operator add-on, and the Helm values that make the Fluent Bit add-on ship
NCCL Inspector dumps from the GPU nodes into it.

The facts both ends share (node folder, table, port, users) come from generator.telemetry,
the same module the job pods are planned from, so the folder Fluent Bit tails is the one the
pods write.
"""

from __future__ import annotations

from typing import Any

from generator.catalog import Cluster
from generator.manifests import render_documents
from generator.platform.context import PlatformContext
from generator.platform.overlay import platform_dir
from generator.telemetry import (
    DATABASE,
    DUMP_VOLUME,
    HTTP_PORT,
    INGEST_USER,
    READER_USER,
    Telemetry,
    insert_uri,
)

SOURCE = "platform/catalog/gke.yaml (telemetry)"
READER_PROFILE = "reader"
# Ingest writes rows and runs the runtime's schema migrations (runtime/telemetry/schema),
# which create the database, tables and materialized views; the reader only reads.
GRANTS = {
    INGEST_USER: "GRANT SELECT, INSERT, CREATE DATABASE, CREATE TABLE, CREATE VIEW "
                 f"ON {DATABASE}.*",
    READER_USER: f"GRANT SELECT ON {DATABASE}.*",
}
# The reader (gkr ui, `gkr telemetry sql`, the diagnosis agent's skill) is read-only in the
# server: readonly = 1 allows read queries only, no SET and no CREATE TEMPORARY TABLE, which
# table functions need (https://clickhouse.com/docs/operations/settings/permissions-for-queries;
# 2 would allow both); its grants hold no FILE, URL or other source besides. clickhouse-connect
# sends no setting a read-only user cannot change. The operator writes `spec.configuration.
# profiles` as users.d XML, `<profile>/<setting>: value` (shared/reference/crds/clickhouse,
# clickhouseinstallations.yaml: profiles, x-kubernetes-preserve-unknown-fields).
PROFILES = {f"{READER_PROFILE}/readonly": 1}
TAG = "nccl.inspector"
PATH_KEY = "file"  # the tailed file's path, parsed into namespace and job, then dropped
PATH_PARSER = "gkr_dump_path"
PASSWORD_ENV, NODE_ENV = "CLICKHOUSE_PASSWORD", "NODE_NAME"  # Fluent Bit's own variables
# Tail offsets survive restarts in the chart's writable mount of the node's /var/log, so a
# restarted Fluent Bit neither re-sends nor skips lines.
OFFSETS_DB = "/var/log/fluent-bit-nccl-inspector.db"

Section = tuple[str, list[tuple[str, str]]]


def produce_telemetry(ctx: PlatformContext) -> None:
    """`<overlay>/platform/telemetry.yaml`: the telemetry namespace and ClickHouseInstallation."""
    telemetry = ctx.catalog.platform.telemetry
    for cluster in ctx.catalog.clusters.values():
        documents = installation(telemetry, [ctx.addons.terraform.pod_cidr])
        ctx.add(f"{platform_dir(cluster)}/telemetry.yaml", documents, SOURCE)


def installation(telemetry: Telemetry, networks: list[str]) -> list[dict[str, Any]]:
    """The namespace and the ClickHouseInstallation: one shard, one replica (more replicas
    need Keeper), data on a PVC. No TTL here: retention belongs to the runtime's tables."""
    return render_documents("platform/telemetry.yaml.j2", telemetry=telemetry,
                            users=users(telemetry, networks), profiles=PROFILES)


def users(telemetry: Telemetry, networks: list[str]) -> dict[str, Any]:
    """The operator's flat user settings: passwords read from the Secret, never written here;
    logins only from the cluster's pods."""
    keys = {INGEST_USER: telemetry.ingest_key, READER_USER: telemetry.reader_key}
    profiles = {INGEST_USER: "default", READER_USER: READER_PROFILE}
    settings: dict[str, Any] = {}
    for user, key in keys.items():
        settings |= {f"{user}/k8s_secret_password": f"{telemetry.secret}/{key}",
                     f"{user}/networks/ip": networks, f"{user}/profile": profiles[user],
                     f"{user}/grants/query": [GRANTS[user]]}
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
    """The chart's config parts as data: tail every job's files, name the job, its team,
    cluster and node in each record, and post the records as NDJSON, one row each."""
    tail = [("Name", "tail"), ("Tag", TAG), ("Path", ",".join(telemetry.tail_globs)),
            ("Path_Key", PATH_KEY), ("Parser", "json"), ("DB", OFFSETS_DB),
            ("Read_from_Head", "On"), ("Buffer_Max_Size", "1MB"), ("Mem_Buf_Limit", "64MB")]
    identity = [("Name", "modify"), ("Match", TAG), ("Add", f"cluster {cluster.name}"),
                ("Add", f"node ${{{NODE_ENV}}}")]
    teams = [("FILTER", [("Name", "modify"), ("Match", TAG),
                         ("Condition", f"Key_value_equals namespace {team.namespace}"),
                         ("Add", f"team {name}")]) for name, team in sorted(cluster.teams.items())]
    # The dumps stay on the node, so retrying without limit loses nothing while ClickHouse
    # is away: the tail pauses when the memory buffer is full.
    post = [("Name", "http"), ("Match", TAG), ("Host", telemetry.service_host),
            ("Port", str(HTTP_PORT)), ("URI", insert_uri()), ("Format", "json_lines"),
            ("Json_date_key", "false"), ("Http_User", INGEST_USER),
            ("Http_Passwd", f"${{{PASSWORD_ENV}}}"), ("Retry_Limit", "no_limits")]
    path = [("Name", PATH_PARSER), ("Format", "regex"), ("Regex", telemetry.path_regex)]
    parse_path = [("Name", "parser"), ("Match", TAG), ("Key_Name", PATH_KEY),
                  ("Parser", PATH_PARSER), ("Reserve_Data", "On")]
    return {"inputs": [("INPUT", tail)],
            "filters": [("FILTER", parse_path), ("FILTER", identity), *teams],
            "outputs": [("OUTPUT", post)],
            "customParsers": [("PARSER", path)]}


def classic(sections: list[Section]) -> str:
    """Fluent Bit's classic configuration format: `[SECTION]`, then indented `Key value`
    lines. Every value is one line by construction (catalog names and paths are patterned)."""
    lines = []
    for name, entries in sections:
        lines += [f"[{name}]", *(f"    {key} {value}" for key, value in entries)]
    return "\n".join(lines) + "\n"
