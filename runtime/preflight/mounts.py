"""Shared mounts: present, writable where the job writes, and of the expected filesystem."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from runtime.preflight.config import MountExpectation, PreflightConfig
from runtime.preflight.result import Finding


def filesystem_of(path: str, table: str = "/proc/mounts") -> str | None:
    """Filesystem type of the mount holding `path` (the longest mount point that is a prefix)."""
    best, kind = "", None
    for line in Path(table).read_text().splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def _writable(path: str) -> str | None:
    """None when a probe file can be written, synced and removed; else why not."""
    try:
        fd, name = tempfile.mkstemp(dir=path, prefix=".gkr-preflight-")
        try:
            os.write(fd, b"gkr")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as error:
        return error.strerror or str(error)
    return None


def _one(mount: MountExpectation) -> Finding:
    if not Path(mount.path).is_dir():
        return Finding(check="mounts", severity="error", message=f"{mount.path} is missing")
    kind = filesystem_of(mount.path)
    if mount.filesystem and kind != mount.filesystem:
        return Finding(check="mounts", severity="error",
                       message=f"{mount.path} is {kind}, expected {mount.filesystem}")
    if mount.writable and (why := _writable(mount.path)):
        return Finding(check="mounts", severity="error",
                       message=f"{mount.path} is not writable: {why}")
    mode = "writable" if mount.writable else "present"
    return Finding(check="mounts", severity="ok", message=f"{mount.path} ({kind}) {mode}")


def check(config: PreflightConfig) -> list[Finding]:
    if not config.mounts:
        return [Finding(check="mounts", severity="ok", message="no shared mounts expected")]
    return [_one(mount) for mount in config.mounts]
