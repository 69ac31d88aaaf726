"""Typed errors of Warden; third-party failures are wrapped with `raise ... from`.

Kubernetes failures are the shared layer's family (`runtime.kube`: `NotFound`, `Conflict`,
...); `ApiFailure` is for the other HTTP services Warden calls.
"""

from __future__ import annotations

from runtime.errors import RuntimeFailure


class WardenError(RuntimeFailure):
    """Base of Warden's failures (a service Warden depends on misbehaved)."""


class ApiFailure(WardenError):
    """Prometheus or Compute Engine answered with an error, or not at all (status 0)."""

    def __init__(self, service: str, status: int, what: str, detail: str = "") -> None:
        self.service, self.status = service, status
        super().__init__(f"{service} answered {status} to {what}: {detail[:300]}")
