"""`CloudRepair` on the Compute Engine API, with the Workload Identity token from metadata.

Reboot is `instances.reset`; escalation is `instances.reportHostAsFaulty`, which moves the VM
off a faulty host (GPU machine families). Both take `requestId`: Compute Engine ignores a
repeat of a request id it already completed, which makes every retry safe. Sources:
cloud.google.com/compute/docs/reference/rest/v1/instances (reset, reportHostAsFaulty).
"""

from __future__ import annotations

import time

from runtime.errors import ConfigError
from runtime.warden.config import CloudConfig
from runtime.warden.jsonhttp import call


def instance_path(provider_id: str) -> str:
    """`projects/P/zones/Z/instances/I` from a node's `gce://P/Z/I` provider id."""
    scheme, _, rest = provider_id.partition("://")
    parts = rest.split("/")
    if scheme != "gce" or len(parts) != 3 or not all(parts):
        raise ConfigError("spec.providerID", f"expected gce://PROJECT/ZONE/INSTANCE, got "
                          f"{provider_id!r}", "node")
    project, zone, instance = parts
    return f"projects/{project}/zones/{zone}/instances/{instance}"


class GceRepair:
    """Reboots and host-repair requests through the Compute Engine REST API."""

    def __init__(self, config: CloudConfig) -> None:
        self.config = config
        self._token, self._expires = "", 0.0

    def reboot(self, provider_id: str, key: str) -> None:
        """Hard-reset the VM behind the node."""
        self._post(f"{instance_path(provider_id)}/reset", key, None)

    def request_repair(self, provider_id: str, key: str, reason: str) -> None:
        """Report the host as faulty so that the VM is moved to a healthy host."""
        body = {
            "disruptionSchedule": "IMMEDIATE",
            "faultReasons": [{"behavior": self.config.fault_behavior,
                              "description": reason[:250]}],
        }
        self._post(f"{instance_path(provider_id)}/reportHostAsFaulty", key, body)

    def _post(self, path: str, key: str, body: dict | None) -> None:
        url = f"{self.config.compute_url.rstrip('/')}/{path}?requestId={key}"
        headers = {"Authorization": f"Bearer {self._access_token()}"}
        call("compute", "POST", url, body=body if body is not None else {}, headers=headers,
             timeout_s=self.config.timeout_s)

    def _access_token(self) -> str:
        if time.monotonic() < self._expires:
            return self._token
        url = f"{self.config.metadata_url.rstrip('/')}/instance/service-accounts/default/token"
        answer = call("metadata", "GET", url, headers={"Metadata-Flavor": "Google"},
                      timeout_s=self.config.timeout_s)
        self._token = answer["access_token"]
        self._expires = time.monotonic() + float(answer.get("expires_in", 0)) - 60
        return self._token
