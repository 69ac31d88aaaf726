"""`python -m runtime.warden --config FILE`: run one Warden worker (the Deployment's command)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from runtime.errors import RuntimeFailure
from runtime.warden.config import WardenConfig, load_config
from runtime.warden.worker import serve


def main(argv: list[str] | None = None) -> int:
    """Parse the one flag, load the config, serve; a bad config is one line, not a traceback."""
    parser = argparse.ArgumentParser(prog="python -m runtime.warden", description=__doc__)
    parser.add_argument("--config", type=Path, help="Warden config YAML (default: built-in)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config) if args.config else WardenConfig()
        asyncio.run(serve(config))
    except RuntimeFailure as error:
        print(f"warden: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
