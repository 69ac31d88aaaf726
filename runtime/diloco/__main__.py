"""`python -m runtime.diloco [--bind tcp://*:5555] [--learners a,b] ...`: the synchroniser.

Settings come from `GKR_DILOCO` (a JSON document; `gkr render` writes it into the
synchroniser's pod), then from the flags. The first line printed is the address it listens
on; each merge is logged; the exit status is 0 when every learner has left, 1 on a failure.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from pydantic import ValidationError

from runtime.config_errors import config_error
from runtime.diloco.config import SynchroniserConfig, from_environment
from runtime.diloco.synchroniser import Synchroniser
from runtime.errors import RuntimeFailure


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runtime.diloco",
                                     description="The DiLoCo synchroniser.")
    parser.add_argument("--bind", help="ZeroMQ address, e.g. tcp://*:5555 (port * picks one)")
    parser.add_argument("--run", help="The experiment's run name.")
    parser.add_argument("--learners", help="Expected learner names, comma-separated.")
    parser.add_argument("--outer-lr", type=float, dest="lr", help="Outer learning rate.")
    parser.add_argument("--outer-momentum", type=float, dest="momentum", help="Outer momentum.")
    parser.add_argument("--no-nesterov", action="store_false", dest="nesterov", default=None,
                        help="Plain momentum instead of Nesterov.")
    parser.add_argument("--round-timeout", type=float, dest="round_timeout_s",
                        help="Seconds a round waits for missing learners.")
    parser.add_argument("--idle-timeout", type=float, dest="idle_timeout_s",
                        help="Seconds without any learner before giving up.")
    parser.add_argument("--checkpoint", help="Folder or fsspec URI of the outer state.")
    parser.add_argument("--keys", help="Folder of the synchroniser's CURVE keys "
                        "(synchroniser.secret, learner.NAME.public).")
    parser.add_argument("--plaintext", action="store_true", default=None,
                        help="No keys: an unauthenticated, unencrypted link (loopback tests).")
    return parser


def settings(argv: list[str], environ: dict[str, str]) -> SynchroniserConfig:
    """The environment's document under the flags given."""
    flags = vars(_parser().parse_args(argv))
    document: dict[str, Any] = from_environment(environ) or {}
    outer = {key: flags.pop(key) for key in ("lr", "momentum", "nesterov")}
    if flags.get("learners") is not None:
        flags["learners"] = tuple(name for name in flags["learners"].split(",") if name)
    document |= {key: value for key, value in flags.items() if value is not None}
    document["outer"] = {**document.get("outer", {}),
                         **{key: value for key, value in outer.items() if value is not None}}
    try:
        return SynchroniserConfig.model_validate(document)
    except ValidationError as error:
        raise config_error(error, "synchroniser settings", SynchroniserConfig) from error


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        synchroniser = Synchroniser(settings(argv, dict(os.environ)))
        print(f"synchroniser listening on {synchroniser.bind()}", flush=True)
        records = synchroniser.serve()
    except RuntimeFailure as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"synchroniser done: {len(records)} rounds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
