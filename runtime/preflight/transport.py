"""NCCL and transport variables of the pod, checked against the values the catalog gives."""

from __future__ import annotations

import os

from runtime.preflight.config import PreflightConfig
from runtime.preflight.result import Finding


def check(config: PreflightConfig, environ: dict[str, str] | None = None) -> list[Finding]:
    environ = dict(os.environ) if environ is None else environ
    findings = []
    for name, expected in sorted(config.transport_env.items()):
        actual = environ.get(name)
        if actual is None:
            findings.append(Finding(check="transport", severity="error",
                                    message=f"{name} is unset; the catalog sets {expected!r}"))
        elif actual != expected:
            findings.append(Finding(check="transport", severity="error",
                                    message=f"{name}={actual!r}; the catalog sets {expected!r}"))
    extra = sorted(n for n in environ if n.startswith("NCCL_") and n not in config.transport_env)
    if extra:
        findings.append(Finding(check="transport", severity="warning",
                                message=f"variables the catalog does not set: {', '.join(extra)}"))
    if not findings:
        findings.append(Finding(check="transport", severity="ok",
                                message=f"{len(config.transport_env)} variables as catalogued"))
    return findings
