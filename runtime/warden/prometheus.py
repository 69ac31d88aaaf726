"""`Telemetry` on the Prometheus HTTP API (instant queries over DCGM exporter metrics)."""

from __future__ import annotations

import urllib.parse

from runtime.warden.config import PrometheusSettings
from runtime.warden.errors import ApiFailure
from runtime.warden.jsonhttp import call


class PrometheusTelemetry:
    """Reads `max by (<node label>) (<metric>)`: the worst GPU of each node."""

    def __init__(self, settings: PrometheusSettings, node_label: str) -> None:
        self.settings, self.node_label = settings, node_label

    def node_max(self, metric: str) -> dict[str, float]:
        """The per-node maximum of a metric; nodes without the series are absent."""
        query = f"max by ({self.node_label}) ({metric})"
        url = f"{self.settings.url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode(
            {"query": query}
        )
        answer = call("prometheus", "GET", url, timeout_s=self.settings.timeout_s)
        if answer.get("status") != "success":
            raise ApiFailure("prometheus", 200, query, str(answer.get("error", answer)))
        return {
            series["metric"].get(self.node_label, ""): float(series["value"][1])
            for series in answer["data"]["result"]
            if series["metric"].get(self.node_label)
        }
