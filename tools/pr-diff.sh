#!/usr/bin/env bash
# The pull request's comment: the change to the rendered tree (clusters/, kustomize/: what
# Argo CD applies) against a base ref, as Markdown, and whether the specs and the committed
# tree agree (`gkr diff --exit-code`). Usage: tools/pr-diff.sh BASE (e.g. origin/main).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: tools/pr-diff.sh BASE}
git rev-parse --verify --quiet "$base^{commit}" >/dev/null || {
  echo "tools/pr-diff.sh: no commit $base (fetch it first: git fetch origin main)" >&2
  exit 2
}
tree=(clusters kustomize)
echo "### What Argo CD would apply"
echo
if git diff --quiet "$base" -- "${tree[@]}"; then
  echo "No change to the rendered tree against \`$base\`."
else
  echo "Against \`$base\`:"
  echo
  echo '```'
  git diff --stat=100 "$base" -- "${tree[@]}"
  echo '```'
  echo
  echo '<details><summary>The manifests</summary>'
  echo
  echo '```diff'
  git diff --no-color "$base" -- "${tree[@]}" | head -c 60000
  echo '```'
  echo '</details>'
fi
echo
status=0
found=$(.venv/bin/gkr diff --exit-code 2>&1) || status=$?
case $status in
  0) echo "The committed tree is what the specs render (\`gkr render --check\`)." ;;
  3) echo "**The committed tree is stale**: run \`gkr render\` and commit. What it would change:" ;;
  *) echo "**\`gkr diff\` failed** (exit $status): the specs do not render." ;;
esac
if [[ $status -ne 0 ]]; then
  echo
  echo '```'
  echo "$found" | head -c 20000
  echo '```'
fi
