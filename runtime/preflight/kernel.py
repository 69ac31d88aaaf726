"""Kernel-log scan: GPU, memory and driver faults (Xid, SXid, ECC, NVLink, PCIe AER, OOM kills).

The fault catalog is data (`faults.yaml`); this module only reads the log and applies it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from runtime.preflight.result import Finding, Severity

XID = re.compile(r"NVRM: Xid \((?P<device>PCI:[0-9A-Fa-f:.]+)\): (?P<code>\d+),(?P<rest>.*)")
CATALOG = Path(__file__).with_name("faults.yaml")


@dataclass(frozen=True)
class Fault:
    """One classified kernel-log line."""

    name: str
    category: str
    severity: Severity
    line: str


@dataclass(frozen=True)
class _Pattern:
    name: str
    regex: re.Pattern[str]
    category: str
    severity: Severity


@cache
def _catalog() -> tuple[dict[int, dict[str, str]], tuple[_Pattern, ...]]:
    data = yaml.safe_load(CATALOG.read_text(encoding="utf-8"))
    patterns = tuple(_Pattern(p["name"], re.compile(p["pattern"]), p["category"], p["severity"])
                     for p in data["patterns"])
    return {int(code): row for code, row in data["xid"].items()}, patterns


def classify(line: str) -> Fault | None:
    """The fault a kernel-log line reports, or None for an ordinary line."""
    xids, patterns = _catalog()
    match = XID.search(line)
    if match:
        code = int(match["code"])
        row = xids.get(code, {"meaning": "unlisted Xid", "category": "gpu",
                              "severity": "warning"})
        name = f"xid-{code} {row['meaning']} on {match['device']}"
        return Fault(name, row["category"], row["severity"], line.strip())  # type: ignore[arg-type]
    for pattern in patterns:
        if pattern.regex.search(line):
            return Fault(pattern.name, pattern.category, pattern.severity, line.strip())
    return None


def scan(lines: list[str]) -> list[Fault]:
    return [fault for line in lines if (fault := classify(line))]


def read_live() -> list[str]:
    """The kernel ring buffer: `dmesg`, else /dev/kmsg; PermissionError when neither is readable."""
    dmesg = shutil.which("dmesg")
    if dmesg:
        done = subprocess.run([dmesg], capture_output=True, text=True, timeout=30, check=False)
        if done.returncode == 0:
            return done.stdout.splitlines()
    return _read_kmsg()


def _read_kmsg() -> list[str]:
    """Records of /dev/kmsg up to now (non-blocking: the read ends at EAGAIN)."""
    lines = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # a record was overwritten while reading; skip it
                continue
            lines.append(record.decode(errors="replace").split(";", 1)[-1].rstrip())
    finally:
        os.close(fd)
    return lines


def check(log_file: str | None) -> list[Finding]:
    """Findings of the kernel-log scan; an unreadable live log is a warning, not a fault."""
    source = log_file or "kernel ring buffer"
    try:
        lines = Path(log_file).read_text(errors="replace").splitlines() if log_file else read_live()
    except OSError as error:
        return [Finding(check="kernel", severity="warning",
                        message=f"{source} unreadable ({error.strerror or error}); "
                                "run privileged or with CAP_SYSLOG to scan it")]
    faults = scan(lines)
    if not faults:
        return [Finding(check="kernel", severity="ok",
                        message=f"{len(lines)} lines of the {source}: no faults")]
    return [Finding(check="kernel", severity=f.severity, category=f.category,
                    message=f"{f.name}: {f.line}") for f in faults]
