"""`python -m runtime.preflight`: run the suite in this pod and print one JSON result on stdout.

Expectations come from `--expect FILE` or the GKR_PREFLIGHT variable (JSON of PreflightConfig).
Exit status: 0 passed, 1 a check found a fault, 2 the expectations are invalid.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from runtime.errors import ConfigError
from runtime.preflight.config import ALL_CHECKS, ENV_VAR, load_config
from runtime.preflight.suite import run_suite


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runtime.preflight", description=__doc__)
    parser.add_argument("--expect", type=Path, help=f"JSON expectations (default: ${ENV_VAR})")
    parser.add_argument("--node", help="node name to report (default: $NODE_NAME or host name)")
    parser.add_argument("--kernel-log", help="scan this file instead of the live kernel log")
    parser.add_argument("--checks", help=f"comma-separated subset of {','.join(ALL_CHECKS)}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    source = str(args.expect) if args.expect else f"${ENV_VAR}"
    try:
        text = args.expect.read_text() if args.expect else os.environ.get(ENV_VAR)
        checks = args.checks.split(",") if args.checks else None
        config = load_config(text, source, node=args.node, kernel_log=args.kernel_log,
                             checks=checks)
    except (ConfigError, OSError) as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 2
    result = run_suite(config)
    print(result.model_dump_json())
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
