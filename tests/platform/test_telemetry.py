"""The cluster side of telemetry: each overlay's ClickHouseInstallation against the vendored
Altinity CRD, and the Fluent Bit pipeline, whose tail path and table are checked against the
job pods' dump folder and the runtime's schema (one source for both ends)."""

from __future__ import annotations

import copy
import fnmatch
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from generator import telemetry
from generator.addons import load_addons
from generator.catalog import Catalog
from generator.errors import CheckFailed, InvalidInput
from generator.output import write_tree
from generator.platform import telemetry as fluent_bit
from generator.pods import plan_pods
from generator.render import render_tree
from generator.schemas import CRD_DIR
from generator.tree import Tree
from generator.validate import check_schemas, validate_repository
from runtime.identity import Taint
from runtime.pods import build_pod
from runtime.telemetry import columns, inspector_load, store
from runtime.telemetry.cluster_schema import QUERY_SETTINGS

REPO = Path(__file__).resolve().parents[2]
CHI = ("clickhouse.altinity.com/v1", "ClickHouseInstallation")
CHK = ("clickhouse-keeper.altinity.com/v1", "ClickHouseKeeperInstallation")


@pytest.fixture(scope="module")
def repo_tree() -> tuple[Tree, Catalog]:
    catalog = Catalog(REPO)
    return render_tree(REPO, catalog, use_cache=False), catalog


def _installation(tree: Tree, cluster: str, kind: tuple[str, str] = CHI
                  ) -> tuple[str, dict[str, Any]]:
    path = f"kustomize/overlays/{cluster}/platform/telemetry.yaml"
    return path, next(d for d in tree.manifests[path] if (d["apiVersion"], d["kind"]) == kind)


def _fluent_bit(tree: Tree, cluster: str) -> dict[str, Any]:
    apps = tree.manifests[f"platform/argocd/apps/{cluster}.yaml"]
    app = next(a for a in apps if a["metadata"]["name"] == f"{cluster}-fluent-bit")
    return app["spec"]["source"]["helm"]["valuesObject"]


def _sections(text: str) -> list[tuple[str, dict[str, list[str]]]]:
    """Fluent Bit's classic format parsed back: (section, key → values) in order."""
    sections: list[tuple[str, dict[str, list[str]]]] = []
    for line in text.splitlines():
        if line.startswith("["):
            sections.append((line.strip("[]"), {}))
        elif line.strip():
            key, _, value = line.strip().partition(" ")
            sections[-1][1].setdefault(key, []).append(value)
    return sections


def _named(text: str, key: str, value: str) -> dict[str, str]:
    """The one section whose `key` is `value` (an input's Tag, an output's Match, a parser's
    Name): the inspector's and the sample ledger's pipelines share the config."""
    (entries,) = [e for _, e in _sections(text) if e.get(key) == [value]]
    return {name: values[0] for name, values in entries.items()}


@pytest.mark.parametrize("cluster", ["usc1-prod", "euw4-prod"])
def test_each_overlay_has_a_valid_installation(repo_tree, cluster: str) -> None:
    tree, catalog = repo_tree
    path, chi = _installation(tree, cluster)
    assert (CRD_DIR / "clickhouse.altinity.com_v1_ClickHouseInstallation.json").is_file()
    assert check_schemas(Tree(manifests={path: tree.manifests[path]}), catalog) == []
    facts = catalog.platform.telemetry
    assert (chi["metadata"]["name"], chi["metadata"]["namespace"]) == ("telemetry", "telemetry")
    assert chi["spec"]["configuration"]["clusters"][0] == {
        "name": telemetry.CLUSTER,
        "layout": {"shardsCount": facts.shards, "replicasCount": facts.replicas}}
    assert (facts.shards, facts.replicas) == (4, 2)  # platform/catalog/gke.yaml
    server = chi["spec"]["templates"]["podTemplates"][0]
    assert chi["spec"]["defaults"]["templates"]["podTemplate"] == server["name"]
    assert server["spec"]["containers"][0]["image"] == facts.image
    claim = chi["spec"]["templates"]["volumeClaimTemplates"][0]
    assert chi["spec"]["defaults"]["templates"]["dataVolumeClaimTemplate"] == claim["name"]
    assert claim["spec"]["resources"]["requests"]["storage"] == facts.storage
    users = chi["spec"]["configuration"]["users"]
    assert users["ingest/k8s_secret_password"] == "clickhouse-telemetry/ingest-password"
    assert users["reader/k8s_secret_password"] == "clickhouse-telemetry/reader-password"
    assert not [key for key in users if key.endswith(("/password", "/password_sha256_hex"))]
    assert users["reader/grants/query"] == ["GRANT SELECT ON telemetry.*",
                                            "GRANT SELECT ON system.macros"]
    assert "INSERT" in users["ingest/grants/query"][0]
    assert users["ingest/grants/query"][1] == "GRANT CREATE TEMPORARY TABLE, CLUSTER ON *.*"
    profiles = chi["spec"]["configuration"]["profiles"]
    for profile in ("default", "reader"):  # the cluster's query settings, for both users
        assert {name: profiles[f"{profile}/{name}"] for name in QUERY_SETTINGS} == \
            QUERY_SETTINGS


@pytest.mark.parametrize("cluster", ["usc1-prod", "euw4-prod"])
def test_the_replicas_are_kept_in_step_by_a_keeper_quorum(repo_tree, cluster: str) -> None:
    tree, catalog = repo_tree
    path, keeper = _installation(tree, cluster, CHK)
    assert (CRD_DIR / "clickhouse-keeper.altinity.com_v1_ClickHouseKeeperInstallation.json"
            ).is_file()
    assert check_schemas(Tree(manifests={path: [keeper]}), catalog) == []
    facts = catalog.platform.telemetry
    assert keeper["spec"]["configuration"]["clusters"][0]["layout"] == {
        "replicasCount": facts.keeper_replicas}
    port = keeper["spec"]["configuration"]["settings"]["keeper_server/tcp_port"]
    _, chi = _installation(tree, cluster)
    # The operator names Keeper's Service keeper-<installation> (Altinity/clickhouse-operator
    # docs/chk-examples/01-chi-simple-with-keeper.yaml).
    assert chi["spec"]["configuration"]["zookeeper"]["nodes"] == [
        {"host": f"keeper-{keeper['metadata']['name']}.{facts.namespace}.svc",
         "port": int(port)}]
    claim = keeper["spec"]["templates"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == facts.keeper_storage


@pytest.mark.parametrize(("field", "value", "message"), [
    ("keeper_replicas", 2, "2 Keeper nodes: use an odd number"),
    ("shards", 0, "greater than or equal to 1"),
    ("replicas", 9, "less than or equal to 5"),
    ("image", "clickhouse/clickhouse-server", "should match pattern"),
])
def test_a_store_the_catalog_cannot_have_is_refused_naming_the_field(
        tmp_path: Path, field: str, value: object, message: str) -> None:
    shutil.copytree(REPO / "platform/catalog", tmp_path / "platform/catalog")
    shutil.copytree(REPO / "clusters", tmp_path / "clusters")
    gke = tmp_path / "platform/catalog/gke.yaml"
    text = gke.read_text()
    current = re.search(rf"^  {field}: (.*)$", text, re.M)
    gke.write_text(text.replace(current.group(0), f"  {field}: {value}"))
    with pytest.raises(InvalidInput) as refused:
        Catalog(tmp_path).platform  # noqa: B018 (loads the file)
    assert f"telemetry.{field}" in str(refused.value) and message in str(refused.value)


def test_a_broken_installation_is_refused_naming_the_field(repo_tree) -> None:
    tree, catalog = repo_tree
    path, chi = _installation(tree, "usc1-prod")
    broken = copy.deepcopy(chi)
    broken["spec"]["configuration"]["clusters"][0]["layout"]["shardsCount"] = "one"
    broken["spec"]["templates"]["volumeClaimTemplate"] = []  # misspelt: templates are lists
    problems = [str(p) for p in check_schemas(Tree(manifests={path: [broken]}), catalog)]
    assert (f"{path}: ClickHouseInstallation/telemetry spec.configuration.clusters.0.layout"
            '.shardsCount: "one" is not of type "integer"') in problems
    assert any("spec.templates" in p and "'volumeClaimTemplate' was unexpected" in p
               for p in problems), problems


def test_gkr_validate_refuses_a_broken_committed_installation(tmp_path: Path) -> None:
    for folder in ("clusters", "platform/catalog", "jobs", "configs"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    write_tree(tmp_path, render_tree(tmp_path, use_cache=False))
    path = tmp_path / "kustomize/overlays/usc1-prod/platform/telemetry.yaml"
    path.write_text(path.read_text().replace("shardsCount: 4", "shardsCount: one"))
    with pytest.raises(CheckFailed, match=r"telemetry\.yaml: ClickHouseInstallation/telemetry "
                                          r"spec\.configuration\.clusters\.0\.layout\.shardsCount"):
        validate_repository(tmp_path, kustomize=False)


def test_the_operator_chart_matches_the_vendored_crd() -> None:
    version = load_addons(REPO).addons["clickhouse-operator"].version
    sources = (CRD_DIR / "SOURCES.md").read_text()
    assert f"`altinity-clickhouse-operator` version {version}" in sources


@pytest.mark.parametrize("cluster", ["usc1-prod", "euw4-prod"])
def test_fluent_bit_posts_ndjson_to_the_records_table(repo_tree, cluster: str) -> None:
    tree, catalog = repo_tree
    config = _fluent_bit(tree, cluster)["config"]
    post = _named(config["outputs"], "Match", fluent_bit.TAG)
    assert (post["Name"], post["Format"], post["Json_date_key"]) == ("http", "json_lines", "false")
    assert (post["Host"], post["Port"]) == ("clickhouse-telemetry.telemetry.svc", "8123")
    query = parse_qs(urlsplit(post["URI"]).query)
    assert query.pop("query") == ["INSERT INTO telemetry.nccl_records FORMAT JSONEachRow"]
    assert query == {name: [value] for name, value in telemetry.RECORDS_INSERT_SETTINGS.items()}
    assert (post["Http_User"], post["Http_Passwd"]) == ("ingest", "${CLICKHOUSE_PASSWORD}")
    env = {e["name"]: e["valueFrom"] for e in _fluent_bit(tree, cluster)["env"]}
    facts = catalog.platform.telemetry
    assert env["CLICKHOUSE_PASSWORD"] == {
        "secretKeyRef": {"name": facts.secret, "key": facts.ingest_key}}
    assert _named(config["inputs"], "Tag", post["Match"])


def test_the_tables_are_the_runtimes() -> None:
    assert (telemetry.DATABASE, telemetry.RECORDS_TABLE) == (store.DATABASE, inspector_load.TABLE)
    assert set(inspector_load.SECTIONS) <= set(columns.schema_columns()[telemetry.RECORDS_TABLE])


def _gpu_job_files(tree: Tree, cluster: str) -> list[tuple[str, str, str, str | None]]:
    """(node path of a dump file, namespace, job, run) of every GPU job of the cluster, derived
    from its pods alone: the volume's host path, the mount's subPath, the inspector's dir."""
    found = []
    for job in tree.jobs:
        if job.cluster.name != cluster or job.accelerator is None:
            continue
        pod = build_pod(plan_pods(job)[job.traits.gpu_role])
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        host = next(v["hostPath"]["path"] for v in pod["spec"]["volumes"]
                    if v["name"] == telemetry.DUMP_VOLUME)
        mount = next(m for m in container["volumeMounts"]
                     if m["mountPath"] == env["NCCL_INSPECTOR_DUMP_DIR"])
        # NCCL Inspector names its file <hostname>-pid<PID>.log (reference/telemetry.md §1).
        folder = f"{host}/{mount['subPath']}"
        found.append((f"{folder}/worker-0-pid4242.log", job.namespace, job.name, None))
        # ... or in the run's subfolder, where the runtime routes them.
        found.append((f"{folder}/llm-7b-3f2a1c/worker-0-pid4242.log", job.namespace, job.name,
                      "llm-7b-3f2a1c"))
    return found


@pytest.mark.parametrize("cluster", ["usc1-prod", "euw4-prod"])
def test_fluent_bit_tails_exactly_the_folder_gpu_pods_write(repo_tree, cluster: str) -> None:
    tree, _ = repo_tree
    values = _fluent_bit(tree, cluster)
    tail = _named(values["config"]["inputs"], "Tag", fluent_bit.TAG)
    parser = _named(values["config"]["customParsers"], "Name", fluent_bit.PATH_PARSER)
    regex = re.compile(parser["Regex"].replace("(?<", "(?P<"))  # Onigmo → Python names
    mounts = {m["name"]: m["mountPath"] for m in values["extraVolumeMounts"]}
    volumes = {v["name"]: v["hostPath"]["path"] for v in values["extraVolumes"]}
    files = _gpu_job_files(tree, cluster)
    assert files
    patterns = tail["Path"].split(",")
    for path, namespace, job, run in files:
        assert any(fnmatch.fnmatch(path, pattern) for pattern in patterns), (path, patterns)
        assert volumes[telemetry.DUMP_VOLUME] == mounts[telemetry.DUMP_VOLUME]
        assert path.startswith(mounts[telemetry.DUMP_VOLUME] + "/")
        match = regex.fullmatch(path)
        assert match and match.groupdict() == {"namespace": namespace, "job": job, "run": run}
        # Flight Recorder dumps (<dir>/fr/rank_N) are not tailed as inspector records.
        fr_dump = path.rsplit("/", 1)[0] + "/fr/rank_0"
        assert not any(fnmatch.fnmatch(fr_dump, pattern) for pattern in patterns)


@pytest.mark.parametrize("cluster", ["usc1-prod", "euw4-prod"])
def test_fluent_bit_ships_the_sample_ledger_files_gpu_pods_write(repo_tree, cluster: str) -> None:
    """The ledger's tail reads exactly the files a GPU pod's ranks write (GKR_LEDGER_DIR inside
    the pod's dump mount), names their namespace, job and run, and posts them as JSONEachRow
    to the runtime's raw ledger table."""
    from runtime.telemetry.ledger_store import RAW_TABLE

    tree, _ = repo_tree
    config = _fluent_bit(tree, cluster)["config"]
    tail = _named(config["inputs"], "Tag", fluent_bit.LEDGER_TAG)
    parser = _named(config["customParsers"], "Name", fluent_bit.LEDGER_PATH_PARSER)
    regex = re.compile(parser["Regex"].replace("(?<", "(?P<"))
    inspector_globs = _named(config["inputs"], "Tag", fluent_bit.TAG)["Path"].split(",")
    jobs = 0
    for job in tree.jobs:
        if job.cluster.name != cluster or job.accelerator is None:
            continue
        pod = build_pod(plan_pods(job)[job.traits.gpu_role])
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        host = next(v["hostPath"]["path"] for v in pod["spec"]["volumes"]
                    if v["name"] == telemetry.DUMP_VOLUME)
        mount = next(m for m in container["volumeMounts"]
                     if m["mountPath"] == telemetry.POD_DUMP_DIR)
        inside = env["GKR_LEDGER_DIR"].removeprefix(telemetry.POD_DUMP_DIR)
        path = f"{host}/{mount['subPath']}{inside}/llm-7b-3f2a1c/17000-g0-r3-42.jsonl"
        assert fnmatch.fnmatch(path, tail["Path"]), (path, tail["Path"])
        assert not any(fnmatch.fnmatch(path, glob) for glob in inspector_globs)
        match = regex.fullmatch(path)
        assert match and match.groupdict() == {"namespace": job.namespace, "job": job.name,
                                               "run": "llm-7b-3f2a1c"}
        jobs += 1
    assert jobs
    post = _named(config["outputs"], "Match", fluent_bit.LEDGER_TAG)
    query = parse_qs(urlsplit(post["URI"]).query)
    assert query["query"] == [f"INSERT INTO telemetry.{RAW_TABLE} FORMAT JSONEachRow"]
    assert fluent_bit.LEDGER_RAW_TABLE == RAW_TABLE


def test_fluent_bit_names_each_record_and_runs_on_every_gpu_node(repo_tree) -> None:
    tree, catalog = repo_tree
    cluster = catalog.clusters["usc1-prod"]
    values = _fluent_bit(tree, cluster.name)
    filters = _sections(values["config"]["filters"])
    added = [value for _, entries in filters for value in entries.get("Add", [])]
    assert f"cluster {cluster.name}" in added and "node ${NODE_NAME}" in added
    assert {f"team {team}" for team in cluster.teams} <= set(added)
    term = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    wanted = sorted(catalog.accelerators[a].gke_accelerator for a in cluster.accelerators)
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == wanted
    assert {"key": Taint.RESERVED_FOR, "operator": "Exists", "effect": "NoSchedule"} \
        in values["tolerations"]


def _edit_fluent_bit(root: Path, **changes: Any) -> None:
    path = root / "platform/catalog/addons.yaml"
    data = yaml.safe_load(path.read_text())
    data["addons"]["fluent-bit"].update(changes)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_rendered_fluent_bit_values_may_not_be_set_by_hand(tmp_path: Path) -> None:
    shutil.copytree(REPO / "platform/catalog", tmp_path / "platform/catalog")
    _edit_fluent_bit(tmp_path, values={"config": {"outputs": "[OUTPUT]"}})
    with pytest.raises(InvalidInput, match=r"addons\.fluent-bit: .*values\.config are rendered "
                                           r"\(ships_nccl_inspector\)"):
        load_addons(tmp_path)
