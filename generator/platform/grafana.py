"""Grafana provisioned from the catalog: the platform's Prometheus and the cluster's ClickHouse
as data sources, and GKR's dashboards as files, all through the grafana chart's own values
(grafana 8.5.2 values.yaml: `datasources`, `dashboardProviders`, `dashboards`, `envValueFrom`,
`plugins`).

* ClickHouse is read with the grafana-clickhouse-datasource plugin as the store's reader user
  (generator.telemetry READER_USER), over HTTP. Its provisioning fields are the plugin's
  (github.com/grafana/clickhouse-datasource pkg/plugin/settings.go: jsonData `host`, `port`,
  `protocol`, `secure`, `username`, `defaultDatabase`; secureJsonData `password`;
  https://grafana.com/docs/plugins/grafana-clickhouse-datasource/latest/configure/).
* The password stays in the telemetry Secret: the pod gets it as a variable and Grafana
  substitutes `${NAME}` in provisioning files
  (https://grafana.com/docs/grafana/latest/administration/provisioning/, "Use environment
  variables"), so neither the tree nor the ConfigMap holds it.
* A dashboard file names its data sources by type only; the uid is the catalog's, written in
  here, so that the catalog is the one place it is set.
"""

from __future__ import annotations

import json
from typing import Any

from generator.addons import CLICKHOUSE_PLUGIN, GrafanaProvisioning
from generator.errors import InvalidInput, Problem
from generator.platform.context import PlatformContext
from generator.telemetry import DATABASE, HTTP_PORT, READER_USER
from generator.yamlio import read_input

PROMETHEUS_TYPE = "prometheus"
CLICKHOUSE_TYPE = CLICKHOUSE_PLUGIN  # a data source's type is its plugin's id
PASSWORD_ENV = "CLICKHOUSE_READER_PASSWORD"  # in Grafana's pod only
PROVIDER = "gkr"
# The chart mounts a provider's dashboards here (values.yaml, dashboardProviders: "`path`
# must be /var/lib/grafana/dashboards/<provider_name>").
PROVIDER_PATH = f"/var/lib/grafana/dashboards/{PROVIDER}"


def grafana_values(ctx: PlatformContext, grafana: GrafanaProvisioning,
                   values: dict[str, Any]) -> dict[str, Any]:
    """The grafana add-on's values with its plugin, data sources and dashboards."""
    plugins = list(values.get("plugins") or [])  # Addon refuses the ClickHouse one there
    telemetry = ctx.catalog.platform.telemetry
    password = {"secretKeyRef": {"name": telemetry.secret, "key": telemetry.reader_key}}
    return {**values, "plugins": [*plugins, f"{CLICKHOUSE_TYPE} {grafana.clickhouse_plugin}"],
            "envValueFrom": {PASSWORD_ENV: password},
            "datasources": {"datasources.yaml": {"apiVersion": 1,
                                                 "datasources": data_sources(ctx, grafana)}},
            "dashboardProviders": {"dashboardproviders.yaml": {
                "apiVersion": 1, "providers": [provider(grafana)]}},
            "dashboards": {PROVIDER: dashboards(ctx, grafana)}}


def data_sources(ctx: PlatformContext, grafana: GrafanaProvisioning) -> list[dict[str, Any]]:
    """Prometheus (the default) and ClickHouse, neither editable in the UI: Git holds them."""
    telemetry = ctx.catalog.platform.telemetry
    prometheus = {"name": grafana.prometheus.name, "uid": grafana.prometheus.uid,
                  "type": PROMETHEUS_TYPE, "access": "proxy", "isDefault": True,
                  "editable": False,
                  "url": f"http://{ctx.addons.address(ctx.addons.warden.prometheus)}"}
    clickhouse = {"name": grafana.clickhouse.name, "uid": grafana.clickhouse.uid,
                  "type": CLICKHOUSE_TYPE, "editable": False,
                  "jsonData": {"host": telemetry.service_host, "port": HTTP_PORT,
                               "protocol": "http", "secure": False, "username": READER_USER,
                               "defaultDatabase": DATABASE},
                  "secureJsonData": {"password": f"${{{PASSWORD_ENV}}}"}}
    return [prometheus, clickhouse]


def provider(grafana: GrafanaProvisioning) -> dict[str, Any]:
    """The file provider of GKR's dashboards: Git is their source, so the UI cannot keep
    edits or delete them."""
    return {"name": PROVIDER, "orgId": 1, "folder": grafana.folder, "type": "file",
            "disableDeletion": True, "editable": False, "options": {"path": PROVIDER_PATH}}


def dashboards(ctx: PlatformContext, grafana: GrafanaProvisioning) -> dict[str, Any]:
    """Each dashboard's JSON text (the chart writes it into a ConfigMap as given)."""
    uids = {PROMETHEUS_TYPE: grafana.prometheus.uid, CLICKHOUSE_TYPE: grafana.clickhouse.uid}
    return {name: {"json": json.dumps(load_dashboard(ctx, name, path, uids), indent=2)}
            for name, path in sorted(grafana.dashboards.items())}


def load_dashboard(ctx: PlatformContext, name: str, path: str,
                   uids: dict[str, str]) -> dict[str, Any]:
    """A dashboard file, its uid the catalog's name and its data sources the catalog's."""
    text = read_input(ctx.catalog.root / path, ctx.catalog.root, path)
    try:
        dashboard = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInput([Problem(path, error.lineno, "", f"not valid JSON: {error.msg}")]) \
            from None
    if not isinstance(dashboard, dict):
        raise InvalidInput([Problem(path, None, "", "not a dashboard object")])
    problems: list[Problem] = []
    if dashboard.get("uid", name) != name:
        problems.append(Problem(path, None, "uid", f"must be the catalog's name {name!r} or "
                                                   "absent (gkr render sets it)"))
    filled = with_uids(dashboard, uids, path, "", problems)
    if problems:
        raise InvalidInput(problems)
    return {**filled, "uid": name}


def with_uids(node: Any, uids: dict[str, str], path: str, where: str,
              problems: list[Problem]) -> Any:
    """`node` with every `datasource: {type}` given the catalog's uid of that type."""
    if isinstance(node, list):
        return [with_uids(v, uids, path, f"{where}[{i}]", problems) for i, v in enumerate(node)]
    if not isinstance(node, dict):
        return node
    found = {key: with_uids(value, uids, path, f"{where}.{key}".lstrip("."), problems)
             for key, value in node.items() if key != "datasource"}
    if "datasource" in node:
        found["datasource"] = _reference(node["datasource"], uids, path,
                                         f"{where}.datasource".lstrip("."), problems)
    return {key: found[key] for key in node}


def _reference(ref: Any, uids: dict[str, str], path: str, where: str,
               problems: list[Problem]) -> Any:
    kind = ref.get("type") if isinstance(ref, dict) else None
    if kind not in uids:
        problems.append(Problem(path, None, where, (
            f"name a provisioned data source by its type ({', '.join(sorted(uids))}), "
            f"not {json.dumps(ref)}")))
        return ref
    if ref.get("uid", uids[kind]) != uids[kind]:
        problems.append(Problem(path, None, f"{where}.uid", (
            f"{ref['uid']!r}; leave it out: gkr render writes the catalog's {uids[kind]!r}")))
    return {**ref, "uid": uids[kind]}
