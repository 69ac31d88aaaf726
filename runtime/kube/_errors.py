"""The one error family of the Kubernetes layer: what was attempted, then the server's word.

A message reads `apply RayJob team-llm/x: <the Status message> (HTTP 409)`; never the
client's dump of headers and body.
"""

from __future__ import annotations

import json
from typing import Any

from runtime.errors import Category, RuntimeFailure


class KubeError(RuntimeFailure):
    """The API server refused or failed a request; `status` is its HTTP code (0: none)."""

    category = Category.SERVICE

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        self.status, self.reason = status, reason
        super().__init__(message)


class NotFound(KubeError):
    """The object, or the kind of object, does not exist (HTTP 404)."""

    category = Category.INVALID_INPUT


class Conflict(KubeError):
    """The object exists, changed meanwhile, or another manager owns the field (HTTP 409)."""


class Invalid(KubeError):
    """The server rejected the object as invalid (HTTP 422)."""

    category = Category.INVALID_INPUT


class Unreachable(KubeError):
    """No answer: the connection failed or timed out."""


_BY_STATUS: dict[int, type[KubeError]] = {404: NotFound, 409: Conflict, 422: Invalid}


def api_error(what: str, status: int, reason: str, body: Any) -> KubeError:
    """The error for a failed request, from the `Status` object the server answered with."""
    if not status:  # the client's own failure before any answer (e.g. TLS)
        return Unreachable(f"{what}: {reason}")
    answer = _status_object(body)
    message = answer.get("message") or reason or "request failed"
    kind = _BY_STATUS.get(status, KubeError)
    return kind(f"{what}: {message} (HTTP {status})", status, answer.get("reason") or reason)


def _status_object(body: Any) -> dict[str, Any]:
    try:
        found = json.loads(body or "{}")
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
