"""A small JSON-over-HTTP helper on urllib, shared by the Prometheus and Compute seams."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from runtime.warden.errors import ApiFailure


def call(service: str, method: str, url: str, *, body: Any = None,
         headers: dict[str, str] | None = None, timeout_s: float = 30.0) -> Any:
    """Send one request and decode the JSON answer; HTTP and network errors become ApiFailure."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            payload = response.read()
    except urllib.error.HTTPError as error:
        raise ApiFailure(service, error.code, f"{method} {url}", error.read().decode()) from error
    except (urllib.error.URLError, OSError) as error:
        raise ApiFailure(service, 0, f"{method} {url}", str(error)) from error
    return json.loads(payload) if payload else {}
