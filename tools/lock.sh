#!/usr/bin/env bash
# Write requirements.lock: every distribution of the project's environment (.venv, made by
# `make setup`) at its installed version. `make setup` and the images
# (platform/images/Containerfile) install with it as pip constraints, so both get the same
# versions. torch stays out: it is pinned in pyproject.toml, and CPU machines take its CPU
# build while the images take the CUDA build with the nvidia-* wheels torch itself pins.
# Refresh after changing a dependency: `tools/lock.sh`, then commit the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
{
  echo "# Written by tools/lock.sh from the environment of \`make setup\`; do not edit by hand."
  .venv/bin/pip freeze --exclude-editable --all \
    | grep -v -E '^(torch|pip|setuptools|wheel)==' | LC_ALL=C sort -f
} > requirements.lock.tmp
mv requirements.lock.tmp requirements.lock
echo "requirements.lock: $(grep -c '==' requirements.lock) pins"
