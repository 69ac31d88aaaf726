"""Which ServiceMonitors the platform's Prometheus scrapes: the labels its selector matches,
derived from the kube-prometheus-stack add-on's values the way its chart does.

The chart (kube-prometheus-stack 65.1.1, templates/prometheus/prometheus.yaml) renders the
Prometheus object's `serviceMonitorSelector` from `prometheus.prometheusSpec`: the given
`serviceMonitorSelector` when it is not empty; else, while
`serviceMonitorSelectorNilUsesHelmValues` is true (the chart's default, values.yaml), the
labels `release: <Helm release>`; else an empty selector, which selects every monitor. A
monitor without those labels is silently never scraped (Warden's DCGM queries then return
nothing), so `gkr render` puts them on every add-on's monitor (Addon.monitor_labels).
"""

from __future__ import annotations

from typing import Any

from generator.addons import Addon

# kube-prometheus-stack's default (values.yaml, prometheus.prometheusSpec) at the pinned
# version; tests/platform/test_platform.py holds it against the chart's own values.
NIL_USES_HELM_VALUES_DEFAULT = True


def selected_labels(release: str, prometheus: Addon) -> dict[str, str]:
    """The labels a ServiceMonitor needs for the Prometheus of release `release` to select
    it (empty: it selects every monitor)."""
    spec = prometheus.prometheus_spec()
    selector: dict[str, Any] = spec.get("serviceMonitorSelector") or {}
    if selector:  # matchExpressions are refused by the catalog (Addons._monitors_selectable)
        return dict(selector.get("matchLabels", {}))
    if spec.get("serviceMonitorSelectorNilUsesHelmValues", NIL_USES_HELM_VALUES_DEFAULT):
        return {"release": release}
    return {}


def with_labels(values: dict[str, Any], dotted: str, labels: dict[str, str]) -> dict[str, Any]:
    """`values` with the mapping at the dotted path holding `labels` (a copy; parents made)."""
    head, _, rest = dotted.partition(".")
    inner = dict(values.get(head) or {})
    return {**values, head: with_labels(inner, rest, labels) if rest else {**inner, **labels}}
