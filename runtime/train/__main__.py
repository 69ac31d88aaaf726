"""`python -m runtime.train CONFIG.yaml key=value ...`: parse, build, run, clean up."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from runtime.crash.launch import Launch
from runtime.errors import RuntimeFailure
from runtime.train.compose import load_config
from runtime.train.driver import run_training

USAGE = "usage: python -m runtime.train CONFIG.yaml [key=value ...]"


def main(argv: list[str]) -> int:
    """Exit status 0 on success, 1 on a configuration or run failure, 2 on bad usage."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        config = load_config(Path(argv[0]), argv[1:])
        logging.basicConfig(level=config.logging.level)
        launch = Launch(str(Path(argv[0]).absolute()), tuple(argv[1:]))
        result = run_training(config, launch=launch)
    except RuntimeFailure as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"run {result.run_id} finished: {len(result.losses)} progress points")
    for summary in result.fleet.values():
        print(f"fleet: {summary.line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
