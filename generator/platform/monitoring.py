"""What the platform's Prometheus scrapes: the labels its monitor selectors match, derived from
the kube-prometheus-stack add-on's values the way its chart does, and the PodMonitors of the
catalog's `pod_monitors` (Ray's metrics on the job pods).

The chart (kube-prometheus-stack 65.1.1, templates/prometheus/prometheus.yaml) renders the
Prometheus object's `serviceMonitorSelector` from `prometheus.prometheusSpec`: the given
`serviceMonitorSelector` when it is not empty; else, while
`serviceMonitorSelectorNilUsesHelmValues` is true (the chart's default, values.yaml), the
labels `release: <Helm release>`; else an empty selector, which selects every monitor. The
`podMonitorSelector` follows the same rule with its own `podMonitorSelectorNilUsesHelmValues`.
A monitor without those labels is silently never scraped (Warden's DCGM queries then return
nothing), so `gkr render` puts them on every monitor it makes or configures.
"""

from __future__ import annotations

from typing import Any, Literal

from generator.addons import ADDONS_FILE, POD_MONITORS_VALUE, Addon, PodMonitor
from generator.catalog import Cluster
from generator.errors import InvalidInput, Problem
from generator.pods import role_ports
from runtime.identity import Label, Role

# kube-prometheus-stack's defaults (values.yaml, prometheus.prometheusSpec) at the pinned
# version; tests/platform/test_platform.py holds them against the chart's own values.
NIL_USES_HELM_VALUES_DEFAULT = True
MonitorKind = Literal["serviceMonitor", "podMonitor"]
# KubeRay labels every Ray pod with its RayCluster (ray-operator/controllers/ray/utils/
# constant.go, RayClusterLabelKey); Ray's own dashboards group by it as `ray_io_cluster`
# (https://docs.ray.io/en/latest/cluster/kubernetes/k8s-ecosystem/prometheus-grafana.html).
RAY_CLUSTER_LABEL = "ray.io/cluster"
# Pod labels every scraped series carries (Prometheus writes a label's `.` and `/` as `_`):
# which job, team and run, and the RayCluster.
TARGET_LABELS = (Label.JOB, Label.TEAM, Label.RUN, RAY_CLUSTER_LABEL)


def selected_labels(release: str, prometheus: Addon,
                    kind: MonitorKind = "serviceMonitor") -> dict[str, str]:
    """The labels a ServiceMonitor (or PodMonitor) needs for the Prometheus of release
    `release` to select it (empty: it selects every monitor)."""
    spec = prometheus.prometheus_spec()
    selector: dict[str, Any] = spec.get(f"{kind}Selector") or {}
    if selector:  # matchExpressions are refused by the catalog (Addons._monitors_selectable)
        return dict(selector.get("matchLabels", {}))
    if spec.get(f"{kind}SelectorNilUsesHelmValues", NIL_USES_HELM_VALUES_DEFAULT):
        return {"release": release}
    return {}


def with_labels(values: dict[str, Any], dotted: str, labels: dict[str, str]) -> dict[str, Any]:
    """`values` with the mapping at the dotted path holding `labels` (a copy; parents made)."""
    head, _, rest = dotted.partition(".")
    inner = dict(values.get(head) or {})
    return {**values, head: with_labels(inner, rest, labels) if rest else {**inner, **labels}}


def with_pod_monitors(values: dict[str, Any], release: str, prometheus: Addon,
                      cluster: Cluster) -> dict[str, Any]:
    """The Prometheus add-on's values with its PodMonitors, labelled for it to select them."""
    labels = selected_labels(release, prometheus, "podMonitor")
    monitors = [pod_monitor(f"addons.{release}.pod_monitors.{name}", name, row, labels, cluster)
                for name, row in sorted(prometheus.pod_monitors.items())]
    head, _, key = POD_MONITORS_VALUE.partition(".")
    return {**values, head: {**(values.get(head) or {}), key: monitors}}


def pod_monitor(field: str, name: str, row: PodMonitor, labels: dict[str, str],
                cluster: Cluster) -> dict[str, Any]:
    """One entry of the chart's additionalPodMonitors (its values.yaml documents the keys):
    the pods of a role in every team namespace of the cluster, on a named port."""
    if row.port not in role_ports(Role(row.role)):
        raise InvalidInput([Problem(ADDONS_FILE, None, f"{field}.port", (
            f"{row.port!r} is no port of a {row.role} pod (generator/pods.py gives it "
            f"{', '.join(sorted(role_ports(Role(row.role)))) or 'none'})"))])
    endpoint: dict[str, Any] = {"port": row.port}
    if row.interval:
        endpoint["interval"] = row.interval
    namespaces = sorted(team.namespace for team in cluster.teams.values())
    return {"name": name, "additionalLabels": labels,
            "selector": {"matchLabels": {Label.ROLE: row.role}},
            "namespaceSelector": {"matchNames": namespaces},
            "podTargetLabels": list(TARGET_LABELS), "podMetricsEndpoints": [endpoint]}
