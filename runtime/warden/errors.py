"""Typed errors of Warden; third-party failures are wrapped with `raise ... from`."""

from __future__ import annotations

from runtime.errors import RuntimeFailure


class WardenError(RuntimeFailure):
    """Base of Warden's failures (a service Warden depends on misbehaved)."""


class ApiFailure(WardenError):
    """An HTTP API (Kubernetes, Prometheus, Compute Engine) answered with an error."""

    def __init__(self, service: str, status: int, what: str, detail: str = "") -> None:
        self.service, self.status = service, status
        super().__init__(f"{service} answered {status} to {what}: {detail[:300]}")


class Conflict(ApiFailure):
    """The object changed or already exists (HTTP 409); the caller may re-read and retry."""
