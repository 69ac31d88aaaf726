"""Liveness of a Warden worker: the worker touches a file; the probe checks its age.

`python -m runtime.warden.alive FILE MAX_AGE_S` exits 0 while the file is fresh. A worker
whose event loop is stuck stops touching it, and the kubelet restarts the container.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path


async def beat(path: Path, period_s: float = 10.0) -> None:
    """Touch the file every period while the event loop runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        path.write_text(f"{time.time():.0f}\n")
        await asyncio.sleep(period_s)


def fresh(path: Path, max_age_s: float) -> bool:
    """Whether the file was touched within the last max_age_s seconds."""
    try:
        return time.time() - path.stat().st_mtime <= max_age_s
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(0 if fresh(Path(sys.argv[1]), float(sys.argv[2])) else 1)
