"""The `gkr` command line: thin commands that turn flags into models and call the library.

Each command module registers its commands on `app` when imported below.
"""

from __future__ import annotations

from generator.cli._app import app, main

# Importing a command module registers its commands on `app`.
from generator.cli import render  # noqa: F401  isort: skip
from generator.cli import run  # noqa: F401  isort: skip
from generator.cli import warden  # noqa: F401  isort: skip
from generator.cli import platform  # noqa: F401  isort: skip
from generator.cli import cluster  # noqa: F401  isort: skip
from generator.cli import jobs  # noqa: F401  isort: skip
from generator.cli import pods  # noqa: F401  isort: skip
from generator.cli import check  # noqa: F401  isort: skip
from generator.cli import ray  # noqa: F401  isort: skip
from generator.cli import telemetry  # noqa: F401  isort: skip
from generator.cli import ui  # noqa: F401  isort: skip
from generator.cli import diagnose  # noqa: F401  isort: skip
from generator.cli import diloco  # noqa: F401  isort: skip
from generator.cli import data  # noqa: F401  isort: skip
from generator.cli import images  # noqa: F401  isort: skip

__all__ = ["app", "main"]
