#!/usr/bin/env bash
# Security scan of the platform: checkov over terraform/ and over every manifest a cluster
# receives (kustomize builds of the overlays, Warden, Argo CD Applications).
# checkov cannot share .venv (it pins packaging<24 and python-dateutil<3 against ray and
# kubernetes), so it lives in .venv-checkov/, created on first use.
# Usage: tools/checkov.sh            (exit 0 only with zero failed checks)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-checkov
if [[ ! -x "$VENV/bin/checkov" ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q checkov
fi
SCAN=$(mktemp -d)
trap 'rm -rf "$SCAN"' EXIT
.venv/bin/gkr platform scan-input "$SCAN/manifests" >/dev/null
status=0
"$VENV/bin/checkov" --config-file tools/checkov.yaml --framework terraform -d terraform || status=$?
"$VENV/bin/checkov" --config-file tools/checkov.yaml --framework kubernetes -d "$SCAN/manifests" || status=$?
exit "$status"
