"""Waiting for a condition instead of sleeping a fixed time: a fixed sleep is either too long
(slow tests) or, under CPU load, too short (flaky tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """A condition did not hold in time; the message says which condition."""


def wait_until(predicate: Callable[[], T], timeout: float, what: str,
               interval: float = 0.01) -> T:
    """Poll `predicate` until it returns a truthy value and return that value; raise
    WaitTimeout naming `what` after `timeout` seconds. The interval grows to 0.2 s so a long
    wait does not spin."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.2)
