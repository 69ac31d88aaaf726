"""Run the preflight checks a config names and gather one structured result."""

from __future__ import annotations

import time
from collections.abc import Callable

from runtime.preflight import collective, compute, kernel, libraries, mounts, transport
from runtime.preflight.config import CheckName, PreflightConfig
from runtime.preflight.result import Finding, PreflightResult

Check = Callable[[PreflightConfig, dict[str, float]], list[Finding]]

CHECKS: dict[CheckName, Check] = {
    "kernel": lambda config, _: kernel.check(config.kernel_log),
    "libraries": lambda config, _: libraries.check(config),
    "transport": lambda config, _: transport.check(config),
    "mounts": lambda config, _: mounts.check(config),
    "compute": compute.check,
    "collective": collective.check,
}


def run_suite(config: PreflightConfig) -> PreflightResult:
    findings: list[Finding] = []
    figures: dict[str, float] = {}
    for name in config.checks:
        start = time.perf_counter()
        findings += CHECKS[name](config, figures)
        figures[f"{name}.seconds"] = round(time.perf_counter() - start, 3)
    return PreflightResult.of(config.node, findings, figures)
