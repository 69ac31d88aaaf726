"""Observability add-ons configured from the catalog (issue 26 item 6): what Prometheus scrapes
(DCGM, kube-state-metrics, Ray's PodMonitors, whose selectors are checked against the pods the
tree renders), Grafana's data sources and run dashboard (whose ClickHouse queries run on chDB
with the project's schema), and the check of every add-on's Helm values against its pinned
chart's vendored defaults and schema, which refuses a hostile catalog edit before anything is
written.

Everything runs the real parts (the renderer, the vendored chart values, jsonschema, chDB);
no cluster, Grafana or Prometheus is involved.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator.addons import ADDONS_FILE, load_addons
from generator.catalog import Catalog
from generator.errors import InvalidInput
from generator.output import GENERATED_ROOTS
from generator.platform.checks import check_chart_values
from generator.platform.grafana import CLICKHOUSE_TYPE, PROMETHEUS_TYPE
from generator.render import render_tree
from generator.schemas.chartvalues import CHART_DIR, contract
from generator.tree import Tree
from runtime.identity import Label, Role
from runtime.telemetry.store import QueryError, Store
from runtime.warden.config import DetectionConfig
from tests.platform.netpol import Peer, admitted

REPO = Path(__file__).resolve().parents[2]
SHARED_CHARTS = REPO.parent / "shared" / "reference" / "charts"
GKR = str(Path(sys.executable).with_name("gkr"))
CLUSTER = "usc1-prod"
# Keys kube-prometheus-stack's templates/prometheus/podmonitors.yaml reads of each entry of
# prometheus.additionalPodMonitors (the same keys its values.yaml documents in comments).
POD_MONITOR_KEYS = {"name", "additionalLabels", "jobLabel", "selector", "podTargetLabels",
                    "sampleLimit", "namespaceSelector", "podMetricsEndpoints"}


@pytest.fixture(scope="module")
def repo_tree() -> tuple[Tree, Catalog]:
    catalog = Catalog(REPO)
    return render_tree(REPO, catalog, use_cache=False), catalog


def _apps(tree: Tree, cluster: str = CLUSTER) -> dict[str, dict[str, Any]]:
    documents = tree.manifests[f"platform/argocd/apps/{cluster}.yaml"]
    return {d["metadata"]["name"]: d for d in documents}


def _values(tree: Tree, addon: str, cluster: str = CLUSTER) -> dict[str, Any]:
    return _apps(tree, cluster)[f"{cluster}-{addon}"]["spec"]["source"]["helm"]["valuesObject"]


def _chart_defaults(name: str, version: str) -> dict[str, Any]:
    found = contract(name, version)
    assert found is not None, f"no vendored defaults of {name} {version}"
    return found.defaults


# --- what Prometheus scrapes ------------------------------------------------------------------

def _selector(release: str, spec: dict[str, Any], kind: str) -> dict[str, Any]:
    """The Prometheus object's selector as kube-prometheus-stack 65.1.1 renders it
    (templates/prometheus/prometheus.yaml): the given one, else `release: <release>` while
    <kind>SelectorNilUsesHelmValues, else every monitor."""
    if spec.get(f"{kind}Selector"):
        return spec[f"{kind}Selector"]
    return {"matchLabels": {"release": release}} if spec[f"{kind}SelectorNilUsesHelmValues"] \
        else {}


def _prometheus_spec(tree: Tree) -> tuple[str, dict[str, Any]]:
    addon = load_addons(REPO).addons["kube-prometheus-stack"]
    defaults = _chart_defaults("kube-prometheus-stack", addon.version)
    values = _values(tree, "kube-prometheus-stack")
    return "kube-prometheus-stack", {**defaults["prometheus"]["prometheusSpec"],
                                     **values.get("prometheus", {}).get("prometheusSpec", {})}


def test_ray_pod_monitors_carry_the_labels_the_installed_prometheus_selects(repo_tree) -> None:
    tree, _ = repo_tree
    release, spec = _prometheus_spec(tree)
    wanted = _selector(release, spec, "podMonitor")
    monitors = _values(tree, "kube-prometheus-stack")["prometheus"]["additionalPodMonitors"]
    assert {m["name"] for m in monitors} == {"ray-head", "ray-workers"}
    for monitor in monitors:
        assert set(monitor) <= POD_MONITOR_KEYS
        assert wanted["matchLabels"].items() <= monitor["additionalLabels"].items()
    assert wanted == {"matchLabels": {"release": "kube-prometheus-stack"}}


def test_kube_state_metrics_is_the_charts_own_and_selected(repo_tree) -> None:
    """kube-prometheus-stack installs kube-state-metrics with a ServiceMonitor labelled
    `release: <release>` (values.yaml: kubeStateMetrics.enabled, kube-state-metrics.
    releaseLabel and prometheus.monitor.enabled), which the default selector picks."""
    tree, _ = repo_tree
    release, spec = _prometheus_spec(tree)
    defaults = _chart_defaults("kube-prometheus-stack", "65.1.1")
    values = _values(tree, "kube-prometheus-stack")
    assert values.get("kubeStateMetrics", defaults["kubeStateMetrics"])["enabled"] is True
    subchart = {**defaults["kube-state-metrics"], **values.get("kube-state-metrics", {})}
    assert subchart["releaseLabel"] is True and subchart["prometheus"]["monitor"]["enabled"]
    assert _selector(release, spec, "serviceMonitor") == {"matchLabels": {"release": release}}


def test_dcgm_exporter_monitor_is_labelled_for_the_same_prometheus(repo_tree) -> None:
    tree, _ = repo_tree
    release, spec = _prometheus_spec(tree)
    monitor = _values(tree, "dcgm-exporter")["serviceMonitor"]
    assert monitor["enabled"] is True
    assert _selector(release, spec, "serviceMonitor")["matchLabels"].items() \
        <= monitor["additionalLabels"].items()


def _pod_templates(node: Any):
    """(pod template, its Ray group or None) of every pod template under a manifest."""
    if isinstance(node, dict):
        template = node.get("template")
        if isinstance(template, dict) and "containers" in (template.get("spec") or {}):
            yield template, node if "rayStartParams" in node else None
        for value in node.values():
            yield from _pod_templates(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pod_templates(value)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_each_ray_monitor_selects_rendered_pods_that_serve_its_port(repo_tree) -> None:
    """Walk every rendered job of every cluster: each PodMonitor selects some pod template
    in its namespaces; each selected pod has a container port of the endpoint's name, and
    Ray in it exports on that port (rayStartParams metrics-export-port); and every Ray head
    and worker in the tree is scraped by some monitor."""
    tree, catalog = repo_tree
    for cluster in catalog.clusters:
        monitors = _values(tree, "kube-prometheus-stack", cluster)["prometheus"][
            "additionalPodMonitors"]
        selected = {m["name"]: 0 for m in monitors}
        for path, documents in tree.manifests.items():
            if not path.startswith(f"kustomize/overlays/{cluster}/jobs/"):
                continue
            for document in documents:
                for template, group in _pod_templates(document):
                    labels = template["metadata"]["labels"]
                    namespace = document["metadata"]["namespace"]
                    matched = [m for m in monitors if _selects(m["selector"], labels)
                               and namespace in m["namespaceSelector"]["matchNames"]]
                    if labels.get(Label.ROLE) in (Role.HEAD, Role.WORKER):
                        assert matched, (path, labels.get(Label.ROLE))
                    for monitor in matched:
                        selected[monitor["name"]] += 1
                        _serves(template, group, monitor["podMetricsEndpoints"][0]["port"])
        assert all(selected.values()), selected


def _serves(template: dict[str, Any], group: dict[str, Any] | None, port_name: str) -> None:
    ray = template["spec"]["containers"][0]  # KubeRay: the Ray container is the first
    ports = {p["name"]: p["containerPort"] for p in ray.get("ports", [])}
    assert port_name in ports, ray["name"]
    assert group is not None
    assert group["rayStartParams"]["metrics-export-port"] == str(ports[port_name])


def _policy_pods(tree: Tree) -> list[tuple[dict[str, Any], str, dict[str, str]]]:
    found = []
    for path, documents in tree.manifests.items():
        if f"/overlays/{CLUSTER}/jobs/" not in path:
            continue
        policies = [d for d in documents if d["kind"] == "NetworkPolicy"]
        for document in documents:
            for template, _ in _pod_templates(document):
                found.append((policies, document["metadata"]["namespace"],
                              template["metadata"]["labels"]))
    return found


def test_only_the_prometheus_namespace_reaches_the_metrics_port(repo_tree) -> None:
    tree, _ = repo_tree
    namespace = load_addons(REPO).addons["kube-prometheus-stack"].namespace
    prometheus, stranger = Peer(namespace, {}), Peer("elsewhere", {})
    checked = 0
    for policies, pod_namespace, labels in _policy_pods(tree):
        if labels.get(Label.ROLE) not in (Role.HEAD, Role.WORKER):
            continue
        target = Peer(pod_namespace, labels)
        assert admitted(policies, target, prometheus, 8080)
        assert not admitted(policies, target, stranger, 8080)
        assert not any(admitted(policies, target, prometheus, port)
                       for port in (6379, 8265, 10001, 52365))
        checked += 1
    assert checked


# --- Grafana: data sources and the run dashboard ------------------------------------------------

def _grafana(tree: Tree) -> dict[str, Any]:
    return _values(tree, "grafana")


def _dashboard(tree: Tree) -> dict[str, Any]:
    return json.loads(_grafana(tree)["dashboards"]["gkr"]["gkr-run"]["json"])


def test_grafana_data_sources_point_at_the_services_the_catalog_names(repo_tree) -> None:
    tree, catalog = repo_tree
    addons = load_addons(REPO)
    values = _grafana(tree)
    sources = {s["type"]: s for s in values["datasources"]["datasources.yaml"]["datasources"]}
    warden = yaml.safe_load(tree.manifests["platform/warden/generated/configmap.yaml"][0][
        "data"]["config.yaml"])
    assert sources[PROMETHEUS_TYPE]["url"] == warden["prometheus"]["url"]  # one Prometheus
    telemetry = catalog.platform.telemetry
    clickhouse = sources[CLICKHOUSE_TYPE]
    assert clickhouse["jsonData"]["host"] == f"clickhouse-{telemetry.installation}." \
                                             f"{telemetry.namespace}.svc"
    installation = next(d for d in tree.manifests[
        f"kustomize/overlays/{CLUSTER}/platform/telemetry.yaml"]
        if d["kind"] == "ClickHouseInstallation")
    users = installation["spec"]["configuration"]["users"]
    user = clickhouse["jsonData"]["username"]
    secret, key = users[f"{user}/k8s_secret_password"].split("/")
    assert users[f"{user}/profile"] == "reader"  # read-only in the server
    env = re.fullmatch(r"\$\{(\w+)\}", clickhouse["secureJsonData"]["password"]).group(1)
    assert values["envValueFrom"][env] == {"secretKeyRef": {"name": secret, "key": key}}
    assert f"{CLICKHOUSE_TYPE} {addons.addons['grafana'].grafana.clickhouse_plugin}" \
        in values["plugins"]
    provider = values["dashboardProviders"]["dashboardproviders.yaml"]["providers"][0]
    assert provider["options"]["path"] == f"/var/lib/grafana/dashboards/{provider['name']}"
    assert set(values["dashboards"]) == {provider["name"]}


def _references(node: Any):
    if isinstance(node, dict):
        if "datasource" in node:
            yield node["datasource"]
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)


def test_the_dashboard_names_only_provisioned_data_sources(repo_tree) -> None:
    tree, _ = repo_tree
    sources = {s["uid"]: s["type"] for s in
               _grafana(tree)["datasources"]["datasources.yaml"]["datasources"]}
    dashboard = _dashboard(tree)
    assert dashboard["uid"] == "gkr-run"
    refs = list(_references(dashboard))
    assert refs and all(sources[ref["uid"]] == ref["type"] for ref in refs)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["run_id"]["datasource"]["type"] == CLICKHOUSE_TYPE


def _grafana_sql(sql: str, variables: dict[str, str]) -> str:
    """A query as Grafana interpolates it (variable syntax, `${name:singlequote}`: the value
    quoted with ' and ' escaped as \\'); anything else left with a `$` fails the test."""
    def value(match: re.Match[str]) -> str:
        name, fmt = match.group(1), match.group(2)
        assert fmt == "singlequote", f"format {fmt!r} of ${name} is not interpolated here"
        return "'" + variables[name].replace("'", "\\'") + "'"

    done = re.sub(r"\$\{(\w+):(\w+)\}", value, sql)
    assert "$" not in done, done
    return done


def _clickhouse_queries(dashboard: dict[str, Any]) -> dict[str, str]:
    queries = {f"variable {v['name']}": v["query"] for v in dashboard["templating"]["list"]
               if v["datasource"]["type"] == CLICKHOUSE_TYPE}
    queries |= {f"panel {p['title']}": t["rawSql"] for p in dashboard["panels"]
                for t in p["targets"] if t["datasource"]["type"] == CLICKHOUSE_TYPE}
    return queries


STEPS = 3


def _rows(run: str, ranks: int, mfu: float | None) -> list[dict[str, Any]]:
    # Recent: the tables' TTLs (runtime/telemetry/schema) drop rows older than months.
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    return [{"ts": start + timedelta(seconds=10 * step + rank), "cluster": CLUSTER,
             "namespace": "team-llm", "team": "llm", "job": "pretrain", "kind": "rayjob",
             "run": run, "rank": rank, "role": "worker", "pod": f"pretrain-worker-{rank}",
             "node": f"gke-node-{rank}", "step": step, "loss": 2.0, "step_time_s": 1.0 + rank,
             "samples_per_s": 10.0, "tokens_per_s": 1000.0 * (rank + 1), "tokens": 1000,
             "mfu": None if mfu is None else mfu + 0.1 * rank}
            for step in range(STEPS) for rank in range(ranks)]


@pytest.fixture(scope="module")
def store_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    dsn = f"chdb://{tmp_path_factory.mktemp('observability') / 'store'}"
    with Store.connect(dsn) as store:
        store.insert("train_steps", _rows("run-o'neil", 2, 0.4) + _rows("other", 1, None))
    return dsn


def test_dashboard_clickhouse_queries_run_on_the_telemetry_schema(repo_tree, store_dsn) -> None:
    """Every ClickHouse query of the rendered dashboard, interpolated as Grafana does, on
    chDB with the runtime's migrations applied, read-only like Grafana's reader user."""
    tree, _ = repo_tree
    queries = _clickhouse_queries(_dashboard(tree))
    run = {"run_id": "run-o'neil"}
    with Store.connect(store_dsn, read_only=True) as store:
        results = {name: store.query(_grafana_sql(sql, run)).dicts()
                   for name, sql in queries.items()}
    assert [r["run"] for r in results["variable run_id"]] == ["run-o'neil", "other"]  # newest
    assert [r["node"] for r in results["variable node"]] == ["gke-node-0", "gke-node-1"]
    steps = results["panel Step time"]
    assert len(steps) == STEPS and all(r["step_time_max_s"] == 2.0 for r in steps)
    assert all(r["step_time_mean_s"] == pytest.approx(1.5) for r in steps)
    throughput = results["panel Throughput"]
    assert all(r["run_tokens_per_s"] == 3000.0 for r in throughput)
    mfu = results["panel MFU"]
    assert all(r["mfu_mean"] == pytest.approx(0.45) and r["mfu_lowest_rank"] == 0.4
               for r in mfu)
    assert [r["time"] for r in steps] == sorted(r["time"] for r in steps)


def test_a_wrong_column_in_a_dashboard_query_fails_on_the_schema(repo_tree, store_dsn) -> None:
    tree, _ = repo_tree
    sql = _clickhouse_queries(_dashboard(tree))["panel MFU"].replace("avg(mfu)", "avg(mfu_pct)")
    with Store.connect(store_dsn, read_only=True) as store, pytest.raises(QueryError):
        store.query(_grafana_sql(sql, {"run_id": "run-o'neil"}))


def test_the_gpu_panel_reads_dcgm_by_the_node_label_warden_reads(repo_tree) -> None:
    tree, _ = repo_tree
    (panel,) = [p for p in _dashboard(tree)["panels"]
                if p["datasource"]["type"] == PROMETHEUS_TYPE]
    expr = panel["targets"][0]["expr"]
    node_label = DetectionConfig.model_fields["node_label"].default
    assert expr == f'DCGM_FI_DEV_GPU_UTIL{{{node_label}=~"${{node:regex}}"}}'


# --- the values against the charts' contracts --------------------------------------------------

def test_vendored_chart_contracts_are_the_charts_own() -> None:
    if not SHARED_CHARTS.is_dir():
        pytest.skip(f"needs ../shared (the charts' default values): {SHARED_CHARTS}")
    for folder in sorted(p for p in CHART_DIR.iterdir() if p.is_dir()):
        for path in folder.iterdir():
            assert path.read_bytes() == (SHARED_CHARTS / folder.name / path.name).read_bytes()


def test_every_rendered_addon_values_match_their_charts(repo_tree) -> None:
    tree, catalog = repo_tree
    assert check_chart_values(tree, catalog) == []
    checked = {a.chart_name for a in load_addons(REPO).addons.values()
               if contract(a.chart_name, a.version)}
    assert {"kube-prometheus-stack", "grafana", "dcgm-exporter",
            "opentelemetry-collector"} <= checked


def test_a_hand_edited_application_value_is_found(repo_tree) -> None:
    tree, catalog = repo_tree
    edited = copy.copy(tree)
    edited.manifests = dict(tree.manifests)
    path = f"platform/argocd/apps/{CLUSTER}.yaml"
    documents = copy.deepcopy(tree.manifests[path])
    app = next(d for d in documents if d["metadata"]["name"] == f"{CLUSTER}-grafana")
    app["spec"]["source"]["helm"]["valuesObject"]["datasource"] = {}
    edited.manifests[path] = documents
    (problem,) = check_chart_values(edited, catalog)
    assert problem.field == (f"Application/{CLUSTER}-grafana "
                             "spec.source.helm.valuesObject.datasource")
    assert "did you mean datasources" in problem.message


def _scratch(tmp_path: Path) -> Path:
    """A copy of the repository's inputs and of its committed generated tree."""
    for folder in ("clusters", "platform/catalog", "platform/warden", "jobs",
                   "terraform/modules", *GENERATED_ROOTS):
        if (REPO / folder).is_dir() and not (tmp_path / folder).exists():
            shutil.copytree(REPO / folder, tmp_path / folder)
    return tmp_path


def _edit(root: Path, addon: str, dotted: str, value: Any) -> None:
    path = root / ADDONS_FILE
    data = yaml.safe_load(path.read_text())
    node = data["addons"][addon]["values"]
    *parents, last = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _outputs(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for top in GENERATED_ROOTS
            for p in sorted((root / top).rglob("*")) if p.is_file()}


HOSTILE = [
    ("grafana", "notAValue", 1, r"the grafana 8\.5\.2 chart has no such value .*allowed here: "),
    ("kube-prometheus-stack", "prometheus.prometheusSpec.retentionn", "30d",
     r"the kube-prometheus-stack 65\.1\.1 chart has no such value .*did you mean retention\b"),
    ("opentelemetry-collector", "mode", "sidecar",
     r"'sidecar' is not one of \['daemonset', 'deployment', 'statefulset', ''\] "
     r"\(the schema of the opentelemetry-collector 0\.108\.0 chart"),
]


@pytest.mark.parametrize(("addon", "dotted", "value", "expected"), HOSTILE,
                         ids=["unknown-key", "misspelt-nested-key", "wrong-type-by-schema"])
def test_a_hostile_values_edit_is_refused_and_nothing_written(tmp_path: Path, addon: str,
                                                              dotted: str, value: Any,
                                                              expected: str) -> None:
    root = _scratch(tmp_path)
    _edit(root, addon, dotted, value)
    before = _outputs(root)
    done = subprocess.run([GKR, "render"], cwd=root, capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(rf"{re.escape(ADDONS_FILE)}:\d+: addons\.{re.escape(addon)}\.values\."
                     rf"{re.escape(dotted)}: {expected}", done.stderr), done.stderr
    assert _outputs(root) == before


def test_validate_and_the_platform_check_refuse_it_too(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    _edit(root, "dcgm-exporter", "serviceMonitor.intervall", "15s")
    for command in (["validate", "--no-kustomize"], ["platform", "check"]):
        done = subprocess.run([GKR, *command], cwd=root, capture_output=True, text=True,
                              check=False, timeout=300)
        assert done.returncode == 1, (command, done.stdout + done.stderr)
        assert "addons.dcgm-exporter.values.serviceMonitor.intervall: " in done.stderr
        assert "did you mean interval" in done.stderr


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d["addons"]["kube-prometheus-stack"]["pod_monitors"]["ray-head"].update(
        port="dashboard-x"),
     r"addons\.kube-prometheus-stack\.pod_monitors\.ray-head\.port: 'dashboard-x' is no port"),
    (lambda d: d["addons"]["grafana"]["values"].update(datasources={}),
     r"addons\.grafana: .*values\.datasources are rendered \(grafana\)"),
    (lambda d: d["addons"]["grafana"]["values"].update(
        plugins=["grafana-clickhouse-datasource 4.0.0"]),
     r"addons\.grafana: .*grafana-clickhouse-datasource is installed at "
     r"grafana\.clickhouse_plugin"),
    (lambda d: d["addons"]["dcgm-exporter"].update(
        pod_monitors={"x": {"role": "head", "port": "metrics"}}),
     r"only the platform's Prometheus .* takes pod_monitors"),
    (lambda d: d["addons"]["kube-prometheus-stack"]["pod_monitors"]["ray-head"].update(
        role="job"), r"pod_monitors\.ray-head\.role: .*'head' or 'worker'"),
])
def test_monitor_and_grafana_rows_the_render_cannot_honour_are_refused(
        tmp_path: Path, edit, expected: str) -> None:
    root = _scratch(tmp_path)
    path = root / ADDONS_FILE
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InvalidInput, match=expected):
        render_tree(root, Catalog(root), use_cache=False)


def test_a_dashboard_naming_an_unprovisioned_data_source_is_refused(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    path = root / "platform/catalog/dashboards/gkr-run.json"
    dashboard = json.loads(path.read_text())
    dashboard["panels"][0]["datasource"] = {"type": "loki"}
    path.write_text(json.dumps(dashboard))
    with pytest.raises(InvalidInput, match=r"gkr-run\.json: panels\[0\]\.datasource: name a "
                                           r"provisioned data source by its type"):
        render_tree(root, Catalog(root), use_cache=False)
