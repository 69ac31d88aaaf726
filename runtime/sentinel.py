"""The sentinel of a persistent RayCluster (seed §4.3): `python -m runtime.sentinel --address H:P`.

It runs as a one-replica Deployment beside the cluster, polls the Ray head's GCS port and logs
each state change. After `failures` consecutive failed probes it exits non-zero, so Kubernetes
restarts it and `gkr status` shows the restarts: the cluster's owner sees a dead head without
opening Ray.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.config_errors import config_error
from runtime.errors import ConfigError

log = logging.getLogger("gkr.sentinel")


class SentinelConfig(BaseModel):
    """How the sentinel probes the Ray head."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    host: str = Field(min_length=1)
    """Host name or address of the Ray head's GCS."""
    port: int = Field(gt=0, lt=65536)
    """GCS port of the Ray head."""
    interval_s: float = Field(10.0, gt=0)
    """Seconds between probes."""
    timeout_s: float = Field(3.0, gt=0)
    """Seconds one TCP connect may take."""
    failures: int = Field(6, ge=1)
    """Consecutive failed probes after which the sentinel exits non-zero."""
    max_probes: int | None = Field(None, ge=1)
    """Stop after this many probes with exit 0 (None: run until failure)."""


def reachable(host: str, port: int, timeout_s: float) -> bool:
    """One probe: does a TCP connection to the GCS port open?"""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def watch(config: SentinelConfig, sleep: Callable[[float], None] = time.sleep) -> int:
    """Probe until `failures` consecutive probes fail (returns 1) or max_probes ran (returns 0)."""
    failed, probes, last = 0, 0, None
    while config.max_probes is None or probes < config.max_probes:
        ok = reachable(config.host, config.port, config.timeout_s)
        probes += 1
        failed = 0 if ok else failed + 1
        if ok != last:
            log.info("ray head %s:%d %s", config.host, config.port,
                     "reachable" if ok else "unreachable")
            last = ok
        if failed >= config.failures:
            log.error("ray head %s:%d unreachable for %d consecutive probes; exiting",
                      config.host, config.port, failed)
            return 1
        sleep(config.interval_s)
    return 0


def parse_args(argv: list[str]) -> SentinelConfig:
    parser = argparse.ArgumentParser(prog="python -m runtime.sentinel", description=__doc__)
    parser.add_argument("--address", required=True, help="HOST:PORT of the Ray head's GCS")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between probes")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per TCP connect")
    parser.add_argument("--failures", type=int, default=6,
                        help="consecutive failures before exiting non-zero")
    parser.add_argument("--max-probes", type=int, default=None, help="stop after N probes")
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("--address", f"{args.address!r}: expected HOST:PORT", "command line")
    try:
        return SentinelConfig(host=host, port=int(port), interval_s=args.interval,
                              timeout_s=args.timeout, failures=args.failures,
                              max_probes=args.max_probes)
    except ValidationError as error:
        raise config_error(error, "command line", SentinelConfig) from None


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as error:
        log.error("%s", error)
        return 2
    return watch(config)


if __name__ == "__main__":
    sys.exit(main())
