"""The generated platform: a new cluster from one catalog file, Kueue matching the pods,
job policies, Terraform structure and tools, the checkov configuration, and the GKE network
objects every network of a pod's interfaces needs.

Everything runs the real parts (Jinja rendering, jsonschema, `kubectl kustomize`,
python-hcl2, the terraform binary where installed); no Kubernetes API is involved.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from generator.addons import load_addons
from generator.catalog import Catalog
from generator.errors import InvalidInput
from generator.output import GENERATED_ROOTS, plan_changes
from generator.platform.checks import (
    check_terraform_fmt,
    check_terraform_structure,
    terraform_binary,
)
from generator.platform.monitoring import NIL_USES_HELM_VALUES_DEFAULT
from generator.policies import check_job_policies
from generator.render import render_tree
from generator.validate import check_kustomize, check_schemas
from runtime.identity import Taint
from runtime.warden.config import parse_config

REPO = Path(__file__).resolve().parents[2]
NEW_CLUSTER = """\
name: ase1-dev
project: reve-train-asia
region: asia-southeast1
zones: [asia-southeast1-b]
kube_context: gke_reve-train-asia_asia-southeast1_ase1-dev
head_pool:
  name: heads
  machine_type: n2-standard-16
  nodes: 1
  allocatable: {cpus: 14, memory: 50Gi}
  head_defaults: {cpus: 4, memory: 16Gi}
accelerators:
  B200:
    node_pool: a4-dev
    nodes: 2
    zone: asia-southeast1-b
    reservation: projects/reve-train-asia/reservations/a4-dev
    compact_placement: true
    gvnic_network: gvnic-1
    gpu_networks: [rdma-0, rdma-1, rdma-2, rdma-3, rdma-4, rdma-5, rdma-6, rdma-7]
teams:
  research: {namespace: team-research, queue: research, group: gkr-research@reve.ai}
"""


def _copy_repo(target: Path) -> Path:
    for folder in ("clusters", "platform/catalog", "platform/warden", "jobs", "terraform/modules"):
        if (REPO / folder).is_dir():
            shutil.copytree(REPO / folder, target / folder)
    return target


@pytest.fixture(scope="module")
def repo_tree():
    catalog = Catalog(REPO)
    return render_tree(REPO, catalog, use_cache=False), catalog


def test_committed_platform_tree_is_current(repo_tree) -> None:
    tree, _ = repo_tree
    changes = plan_changes(REPO, tree)
    assert not changes, f"run `gkr render`: {changes}"
    assert {"platform/argocd", "terraform/clusters"} <= set(GENERATED_ROOTS)


def test_new_cluster_from_one_catalog_file(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    (root / "clusters/ase1-dev.yaml").write_text(NEW_CLUSTER, encoding="utf-8")
    catalog = Catalog(root)
    tree = render_tree(root, catalog, use_cache=False)
    overlay = "kustomize/overlays/ase1-dev"
    for path in (f"{overlay}/platform/kueue.yaml", f"{overlay}/platform/namespaces.yaml",
                 f"{overlay}/platform/rbac.yaml", f"{overlay}/platform/image-precache.yaml",
                 "platform/argocd/apps/ase1-dev.yaml", "terraform/clusters/ase1-dev/main.tf.json"):
        assert path in tree.files, path
    assert "../../components/b200" in tree.files[f"{overlay}/kustomization.yaml"]
    apps = {d["metadata"]["name"]: d for d in tree.manifests["platform/argocd/apps/ase1-dev.yaml"]}
    assert apps["ase1-dev-platform"]["spec"]["source"]["path"] == overlay
    assert apps["ase1-dev-kuberay-operator"]["spec"]["destination"]["name"] == "ase1-dev"
    module = json.loads(tree.files["terraform/clusters/ase1-dev/main.tf.json"])["module"]["cluster"]
    assert module["accelerator_pools"]["B200"]["reservation"].endswith("/a4-dev")
    assert module["roce_zone"] == "asia-southeast1-b"
    assert set(module["node_networks"]) == {"gvnic-1", *(f"rdma-{i}" for i in range(8))}
    assert f"{overlay}/platform/networks.yaml" in tree.files
    kinds = {d["kind"]: d for d in tree.manifests[f"{overlay}/platform/kueue.yaml"]}
    assert kinds["LocalQueue"]["metadata"]["namespace"] == "team-research"
    assert check_schemas(tree, catalog) == []
    assert check_terraform_structure(tree, catalog) == []
    problems, built = check_kustomize(tree)
    assert problems == [] and built == 4


def test_kueue_flavors_cover_every_rendered_pool(repo_tree) -> None:
    """Kueue can only admit a pod whose node selector matches one ResourceFlavor."""
    tree, catalog = repo_tree
    pool_label = catalog.platform.labels["node_pool"]
    for job in tree.jobs:
        kueue = tree.manifests[f"kustomize/overlays/{job.cluster.name}/platform/kueue.yaml"]
        pools = {d["spec"]["nodeLabels"][pool_label]
                 for d in kueue if d["kind"] == "ResourceFlavor"}
        queues = {(d["metadata"]["namespace"], d["metadata"]["name"])
                  for d in kueue if d["kind"] == "LocalQueue"}
        assert (job.namespace, job.queue) in queues
        wanted = job.pool.node_pool if job.pool else job.cluster.head_pool.name
        assert wanted in pools


def _job_tree(repo_tree, mutate):
    tree, catalog = repo_tree
    mutated = copy.copy(tree)
    mutated.manifests = dict(tree.manifests)
    path = next(p for p in tree.manifests if "/jobs/" in p and "H100" in tree.files[p]
                and "tcpx-daemon" in tree.files[p])
    documents = copy.deepcopy(tree.manifests[path])
    mutate(documents[0])
    mutated.manifests[path] = documents
    return check_job_policies(mutated, catalog)


def _first_pod(document):
    from generator.policies import pod_specs

    return next(pod for _, pod in pod_specs(document) if any(
        "tcpx" in c.get("name", "") for c in pod.get("initContainers", [])))


def test_policies_pass_on_committed_jobs(repo_tree) -> None:
    tree, catalog = repo_tree
    assert check_job_policies(tree, catalog) == []


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda d: d["metadata"].update(namespace="kube-system"), "leaves the folder"),
    (lambda d: _first_pod(d)["containers"][0].setdefault("securityContext", {})
     .update(privileged=True), "runs privileged"),
    (lambda d: _first_pod(d).update(hostNetwork=True), "hostNetwork"),
    (lambda d: _first_pod(d)["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
     "host path '/'"),
    (lambda d: _first_pod(d)["containers"][0].update(image="python:3.11"), "not pinned"),
    (lambda d: _first_pod(d)["initContainers"][0]["securityContext"]["capabilities"]["add"]
     .append("SYS_ADMIN"), "SYS_ADMIN"),
])
def test_policies_refuse(repo_tree, mutate, expected: str) -> None:
    problems = _job_tree(repo_tree, mutate)
    assert problems and any(expected in str(p) for p in problems), problems


def test_terraform_root_drift_is_found(repo_tree) -> None:
    tree, catalog = repo_tree
    drifted = copy.copy(tree)
    drifted.files = dict(tree.files)
    path = "terraform/clusters/usc1-prod/main.tf.json"
    document = json.loads(tree.files[path])
    document["module"]["cluster"]["accelerator_pools"]["H200"]["nodes"] = 1
    document["module"]["cluster"]["node_networks"]["rdma-0"]["vpc"] = "elsewhere"
    document["module"]["cluster"]["typo"] = 1
    drifted.files[path] = json.dumps(document)
    messages = {p.field: p.message for p in check_terraform_structure(drifted, catalog)}
    assert "differs" in messages["module.cluster.accelerator_pools"]
    assert "differs" in messages["module.cluster.node_networks"]
    assert "not a variable" in messages["module.cluster.typo"]


def test_terraform_fmt(tmp_path: Path) -> None:
    if terraform_binary() is None:
        report = check_terraform_fmt(tmp_path)
        assert report.skipped and "no terraform binary" in report.skipped[0]
        pytest.skip(report.skipped[0])
    assert check_terraform_fmt(REPO).problems == []
    (tmp_path / "terraform").mkdir()
    (tmp_path / "terraform/bad.tf").write_text('variable "x" {\ntype=string\n}\n')
    problems = check_terraform_fmt(tmp_path).problems
    assert [p.file for p in problems] == ["terraform/bad.tf"]


def test_addon_catalog_errors_name_the_field(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    path = root / "platform/catalog/addons.yaml"
    text = path.read_text().replace("    chart: kuberay-operator\n", "", 1)
    path.write_text(text.replace("version: 0.19.2", "version: latest", 1))
    with pytest.raises(InvalidInput) as error:
        load_addons(root)
    message = str(error.value)
    assert "addons.kuberay-operator" in message and "addons.kueue.version" in message


def test_every_checkov_skip_has_a_reason() -> None:
    lines = (REPO / "tools/checkov.yaml").read_text().splitlines()
    skips = [line for line in lines if re.match(r"^\s+- CKV", line)]
    assert skips
    for line in skips:
        assert re.match(r"^\s+- CKV2?_\w+_\d+\s+#\s*\S.{20,}", line), line
    for path in (REPO / "terraform").rglob("*.tf"):
        for line in path.read_text().splitlines():
            if "checkov:skip=" in line:
                assert re.search(r"checkov:skip=CKV2?_\w+_\d+:.{20,}", line), line


@pytest.mark.slow
def test_checkov_scan_has_no_failed_checks() -> None:
    """The real checkov in its own venv (tools/checkov.sh creates it on first use)."""
    if not (REPO / ".venv-checkov/bin/checkov").exists() and shutil.which("python3") is None:
        pytest.skip("no python3 to create the checkov venv")
    result = subprocess.run([str(REPO / "tools/checkov.sh")], cwd=REPO, capture_output=True,
                            text=True, check=False, timeout=900)
    if not (REPO / ".venv-checkov/bin/checkov").exists():
        pytest.skip(f"checkov venv could not be created: {result.stderr[-500:]}")
    figures = re.findall(r"Passed checks: (\d+), Failed checks: (\d+)", result.stdout)
    assert len(figures) == 2, result.stdout[-2000:]
    assert all(int(failed) == 0 for _, failed in figures), result.stdout[-4000:]
    assert result.returncode == 0


def _warden_config(tree) -> dict:
    configmap = tree.manifests["platform/warden/generated/configmap.yaml"][0]
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _edit_addons(root: Path, edit) -> None:
    path = root / "platform/catalog/addons.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_warden_config_points_at_the_addons_the_catalog_installs(repo_tree) -> None:
    tree, _ = repo_tree
    addons, config = load_addons(REPO), _warden_config(tree)
    prometheus = addons.addons["kube-prometheus-stack"]
    assert addons.warden.prometheus.addon == "kube-prometheus-stack"
    assert config["prometheus"]["url"] == (
        f"http://kube-prometheus-stack-prometheus.{prometheus.namespace}:9090")
    temporal = addons.addons["temporal"]
    assert config["temporal"]["address"] == f"temporal-frontend.{temporal.namespace}:7233"
    apps = {d["metadata"]["name"]: d for d in tree.manifests["platform/argocd/apps/usc1-prod.yaml"]}
    source = apps["usc1-prod-temporal"]["spec"]["source"]
    assert (source["chart"], source["targetRevision"]) == ("temporal", temporal.version)
    assert apps["usc1-prod-temporal"]["spec"]["destination"]["namespace"] == temporal.namespace
    assert config["reservations"]["taint_key"] == Taint.RESERVED_FOR
    assert parse_config(config).checks.namespace == Catalog(REPO).platform.node_checks.namespace


def test_gpu_addons_tolerate_the_reservation_taint_of_runtime_identity(repo_tree) -> None:
    tree, _ = repo_tree
    apps = {d["metadata"]["name"]: d for d in tree.manifests["platform/argocd/apps/usc1-prod.yaml"]}
    values = apps["usc1-prod-dcgm-exporter"]["spec"]["source"]["helm"]["valuesObject"]
    assert {"key": Taint.RESERVED_FOR, "operator": "Exists", "effect": "NoSchedule"} \
        in values["tolerations"]
    assert "gkr.dev/" not in (REPO / "platform/catalog/addons.yaml").read_text()
    assert "reservation_taint" not in (REPO / "platform/catalog/gke.yaml").read_text()


def test_a_catalog_change_rerenders_the_warden_config(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)

    def move_prometheus(data: dict) -> None:
        data["addons"]["kube-prometheus-stack"]["namespace"] = "metrics"
        data["addons"]["temporal"]["services"]["frontend"]["port"] = 7300

    _edit_addons(root, move_prometheus)
    tree = render_tree(root, Catalog(root), use_cache=False)
    config = _warden_config(tree)
    assert config["prometheus"]["url"] == "http://kube-prometheus-stack-prometheus.metrics:9090"
    assert config["temporal"]["address"] == "temporal-frontend.temporal:7300"
    assert "platform/warden/generated/configmap.yaml" in plan_changes(root, tree).written


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d["warden"]["settings"]["detection"].update(intervall_s=5),
     r"addons\.yaml:\d+: warden\.settings\.detection\.intervall_s: unknown field; allowed: "),
    (lambda d: d["warden"]["settings"].update(prometheus={"url": "http://elsewhere:9090"}),
     r"addons\.yaml:\d+: warden\.settings\.prometheus\.url: filled in by `gkr render`"),
    (lambda d: d["warden"]["settings"]["memory"].update(escalate_after=0),
     r"warden\.settings\.memory\.escalate_after: input should be greater than or equal to 1"),
])
def test_bad_warden_settings_fail_the_render(tmp_path: Path, edit, expected: str) -> None:
    root = _copy_repo(tmp_path)
    _edit_addons(root, edit)
    with pytest.raises(InvalidInput, match=expected):
        render_tree(root, Catalog(root), use_cache=False)


def test_warden_must_name_an_addon_service(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    _edit_addons(root, lambda d: d["addons"].pop("temporal"))
    with pytest.raises(InvalidInput, match=r"warden\.temporal: temporal/frontend is no add-on "
                                           r"service; known: kube-prometheus-stack/prometheus"):
        load_addons(root)


# --- monitors the Prometheus selects (generator/platform/monitoring.py) ----------------------

CHARTS = REPO.parent / "shared" / "reference" / "charts"  # the charts' own default values


def _chart_defaults(folder: str) -> dict:
    path = CHARTS / folder / "values.yaml"
    if not path.exists():
        pytest.skip(f"needs ../shared (the chart's default values): {path}")
    return yaml.safe_load(path.read_text())


def _apps(tree, cluster: str = "usc1-prod") -> dict[str, dict]:
    documents = tree.manifests[f"platform/argocd/apps/{cluster}.yaml"]
    return {d["metadata"]["name"]: d for d in documents}


def _values(apps: dict[str, dict], name: str) -> dict:
    return apps[name]["spec"]["source"]["helm"]["valuesObject"]


def test_the_dcgm_monitor_carries_the_labels_the_installed_prometheus_selects(repo_tree) -> None:
    """The selector as kube-prometheus-stack 65.1.1 renders it (templates/prometheus/
    prometheus.yaml: the given serviceMonitorSelector, else `release: <release>` while
    serviceMonitorSelectorNilUsesHelmValues, else all) from its chart defaults under the
    catalog's values, against the labels the rendered dcgm-exporter release puts on its
    ServiceMonitor (the dcgm-exporter chart's serviceMonitor.additionalLabels)."""
    chart, dcgm_chart = (_chart_defaults("kube-prometheus-stack-65.1.1"),
                         _chart_defaults("dcgm-exporter-3.5.0"))
    tree, _ = repo_tree
    apps = _apps(tree)
    release = apps["usc1-prod-kube-prometheus-stack"]["spec"]["source"]["helm"]["releaseName"]
    spec = {**chart["prometheus"]["prometheusSpec"],
            **_values(apps, "usc1-prod-kube-prometheus-stack").get("prometheus", {}).get(
                "prometheusSpec", {})}
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is NIL_USES_HELM_VALUES_DEFAULT
    wanted = (spec["serviceMonitorSelector"] or
              ({"matchLabels": {"release": release}}
               if spec["serviceMonitorSelectorNilUsesHelmValues"] else {}))
    monitor = _values(apps, "usc1-prod-dcgm-exporter")["serviceMonitor"]
    assert "additionalLabels" in dcgm_chart["serviceMonitor"]  # a key the chart has
    assert monitor["enabled"] is True
    assert wanted["matchLabels"].items() <= monitor["additionalLabels"].items()
    assert wanted == {"matchLabels": {"release": "kube-prometheus-stack"}}


@pytest.mark.parametrize(("spec", "labels"), [
    ({"serviceMonitorSelector": {"matchLabels": {"scraped-by": "fleet"}}}, {"scraped-by": "fleet"}),
    ({"serviceMonitorSelectorNilUsesHelmValues": False}, {}),  # it selects every monitor
])
def test_the_monitor_labels_follow_the_prometheus_selector(tmp_path: Path, spec: dict,
                                                           labels: dict) -> None:
    root = _copy_repo(tmp_path)
    _edit_addons(root, lambda d: d["addons"]["kube-prometheus-stack"]["values"].update(
        prometheus={"prometheusSpec": spec}))
    apps = _apps(render_tree(root, Catalog(root), use_cache=False))
    assert _values(apps, "usc1-prod-dcgm-exporter")["serviceMonitor"] == {
        "enabled": True, "additionalLabels": labels}


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d["addons"]["kube-prometheus-stack"]["values"].update(prometheus={
        "prometheusSpec": {"serviceMonitorSelector": {"matchExpressions": [
            {"key": "team", "operator": "In", "values": ["ml"]}]}}}),
     r"serviceMonitorSelector: matchExpressions cannot be met"),
    (lambda d: d["addons"]["dcgm-exporter"]["values"]["serviceMonitor"].update(
        additionalLabels={"release": "mine"}),
     r"addons\.dcgm-exporter: .*values\.serviceMonitor\.additionalLabels is rendered"),
])
def test_monitor_labels_the_render_cannot_give_are_catalog_errors(tmp_path: Path, edit,
                                                                   expected: str) -> None:
    root = _copy_repo(tmp_path)
    _edit_addons(root, edit)
    with pytest.raises(InvalidInput, match=expected):
        load_addons(root)


def test_gke_auto_repair_is_off_on_the_gpu_pools_warden_repairs() -> None:
    """Warden drains, reboots and stress-tests GPU nodes; GKE's auto-repair would recreate
    them underneath it. The head pool, which Warden leaves alone, keeps it."""
    import hcl2

    with (REPO / "terraform/modules/gke-cluster/node_pools.tf").open() as handle:
        pools = {name.strip('"'): body for block in hcl2.load(handle)["resource"]
                 for kind, named in block.items()
                 if kind.strip('"') == "google_container_node_pool"
                 for name, body in named.items()}
    management = {name: pool["management"][0] for name, pool in pools.items()}
    assert management["accelerators"]["auto_repair"] is False
    assert management["heads"]["auto_repair"] is True
    assert all(m["auto_upgrade"] is True for m in management.values())


def _containers(node):
    """Every container spec under a manifest (any kind: pods, templates, RayCluster groups)."""
    if isinstance(node, dict):
        if "image" in node and "name" in node:
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)


def test_every_job_pod_reaches_the_temporal_namespace_warden_runs_in(repo_tree) -> None:
    """torchft's shrink requests (runtime.ft.shrink) go where Warden's worker polls: the
    address and namespace in every rendered container that runs the runtime (it has a
    GKR_ROLE; NIC daemons and the sentinel have none) are those of Warden's config."""
    tree, _ = repo_tree
    temporal = _warden_config(tree)["temporal"]
    jobs = [path for path in tree.manifests if "/jobs/" in path]
    assert jobs
    for path in jobs:
        for container in (c for doc in tree.manifests[path] for c in _containers(doc)):
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            if "GKR_ROLE" not in env:
                continue
            assert env["GKR_TEMPORAL_ADDRESS"] == temporal["address"], (path, container["name"])
            assert env["GKR_TEMPORAL_NAMESPACE"] == temporal["namespace"] == "warden"


def test_a_catalog_change_moves_the_jobs_temporal_too(tmp_path: Path) -> None:
    root = _copy_repo(tmp_path)
    _edit_addons(root, lambda d: d["warden"]["settings"]["temporal"].update(namespace="fleet"))
    tree = render_tree(root, Catalog(root), use_cache=False)
    path = next(p for p in tree.manifests if "/jobs/" in p)
    env = {e["name"]: e.get("value") for doc in tree.manifests[path]
           for c in _containers(doc) for e in c.get("env", [])}
    assert env["GKR_TEMPORAL_NAMESPACE"] == _warden_config(tree)["temporal"]["namespace"] == "fleet"


# --- the GPU NICs' networks (generator/platform/networks.py) ---------------------------------

INTERFACES = "networking.gke.io/interfaces"


def _pod_networks(node):
    """Every network a pod template under a manifest names in its interfaces annotation."""
    if isinstance(node, dict):
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        if INTERFACES in annotations:
            yield from (nic["network"] for nic in json.loads(annotations[INTERFACES]))
        for value in node.values():
            yield from _pod_networks(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pod_networks(value)


def _network_objects(tree, cluster: str) -> dict[str, dict[str, dict]]:
    documents = tree.manifests.get(f"kustomize/overlays/{cluster}/platform/networks.yaml", [])
    objects: dict[str, dict[str, dict]] = {}
    for document in documents:
        objects.setdefault(document["kind"], {})[document["metadata"]["name"]] = document
    return objects


def test_every_network_a_pod_names_has_its_network_objects(repo_tree) -> None:
    """GKE admits a pod only when each network of its interfaces has a Network, whose
    GKENetworkParamSet names the VPC and subnet Terraform gives the node pool."""
    tree, _ = repo_tree
    named: dict[str, set[str]] = {}
    for path in (p for p in tree.manifests if "/jobs/" in p):
        cluster = path.split("/")[2]
        for document in tree.manifests[path]:
            named.setdefault(cluster, set()).update(_pod_networks(document))
    assert {"gvnic-1", "rdma-0", "vpc-8"} <= set().union(*named.values())
    for cluster, networks in named.items():
        objects = _network_objects(tree, cluster)
        module = json.loads(tree.files[f"terraform/clusters/{cluster}/main.tf.json"])
        subnets = module["module"]["cluster"]["node_networks"]
        for network in networks - {"default"}:
            ref = objects["Network"][network]["spec"]["parametersRef"]
            assert (ref["kind"], ref["name"]) == ("GKENetworkParamSet", network), network
            params = objects["GKENetworkParamSet"][network]["spec"]
            assert (params["vpc"], params["vpcSubnet"]) == (
                subnets[network]["vpc"], subnets[network]["subnet"]), network


def test_rdma_networks_are_rdma_devices_of_one_roce_vpc_beside_a_gvnic(repo_tree) -> None:
    tree, _ = repo_tree
    objects = _network_objects(tree, "usc1-prod")
    modes = {name: d["spec"]["deviceMode"] for name, d in objects["GKENetworkParamSet"].items()}
    assert modes == {"gvnic-1": "NetDevice", **{f"rdma-{i}": "RDMA" for i in range(8)},
                     **{f"vpc-{i}": "NetDevice" for i in range(1, 9)}}
    assert {d["spec"]["type"] for d in objects["Network"].values()} == {"Device"}
    module = json.loads(tree.files["terraform/clusters/usc1-prod/main.tf.json"])["module"]
    cluster = module["cluster"]
    assert cluster["accelerator_pools"]["H200"]["node_networks"] == [
        "gvnic-1", *(f"rdma-{i}" for i in range(8))]
    networks = cluster["node_networks"]
    assert {networks[f"rdma-{i}"]["vpc"] for i in range(8)} == {"usc1-prod-roce"}
    assert len({networks[f"rdma-{i}"]["subnet"] for i in range(8)}) == 8
    assert networks["gvnic-1"]["layout"] == "vpc_per_nic"
    assert cluster["roce_zone"] == "us-central1-a"
    roce = (REPO / "terraform/modules/gke-cluster/network.tf").read_text()
    assert 'networkProfiles/${var.roce_zone}-vpc-roce"' in roce


def test_network_objects_are_checked_against_gkes_crds(repo_tree) -> None:
    tree, catalog = repo_tree
    broken = copy.copy(tree)
    path = "kustomize/overlays/usc1-prod/platform/networks.yaml"
    documents = copy.deepcopy(tree.manifests[path])
    params = next(d for d in documents if d["kind"] == "GKENetworkParamSet")
    params["spec"]["deviceMode"] = "Rdma"
    network = next(d for d in documents if d["kind"] == "Network")
    network["spec"]["parametersRef"]["typo"] = 1
    broken.manifests = {path: documents}
    messages = [f"{p.field}: {p.message}" for p in check_schemas(broken, catalog)]
    assert len(messages) == 2, messages
    assert any("spec.deviceMode" in m and "Rdma" in m for m in messages), messages
    assert any("spec.parametersRef" in m and "typo" in m for m in messages), messages
