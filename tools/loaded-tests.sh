#!/usr/bin/env bash
# The slow tests (real Ray, Temporal, multi-process torch.distributed) N times beside two CPU
# burners, as a loaded CI machine runs them: a test that passes only on an idle machine fails
# here. Prints each run's counts and time, keeps each run's log, and exits non-zero if any
# run failed. The burners are started here and always killed, however the script ends.
# Usage: tools/loaded-tests.sh [RUNS (default 3)] [more pytest arguments...]
# The tests run in parallel processes as `make test` runs them (TEST_WORKERS, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
logs=$(mktemp -d -t loaded-tests.XXXXXX)
burners=()

stop_burners() {
  for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${burners[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_burners EXIT
for _ in 1 2; do
  yes >/dev/null &
  burners+=("$!")
done

# The counts of a junit report: passed failed errors skipped.
counts() {
  .venv/bin/python - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root if root.tag == "testsuite" else root.find("testsuite")
n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
print(n["tests"] - n["failures"] - n["errors"] - n["skipped"], n["failures"], n["errors"],
      n["skipped"])
PY
}

failed_runs=0
for run in $(seq 1 "$runs"); do
  start=$SECONDS
  status=0
  .venv/bin/pytest -m slow -q -p no:cacheprovider -n "${TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
    --junitxml="$logs/run-$run.xml" "$@" >"$logs/run-$run.log" 2>&1 || status=$?
  elapsed=$((SECONDS - start))
  if [[ -s "$logs/run-$run.xml" ]]; then
    read -r passed failures errors skipped < <(counts "$logs/run-$run.xml")
  else
    passed=0 failures=0 errors=1 skipped=0
  fi
  printf 'run %d/%d: %d passed, %d failed, %d errors, %d skipped in %dm%02ds (pytest exit %d)\n' \
    "$run" "$runs" "$passed" "$failures" "$errors" "$skipped" $((elapsed / 60)) \
    $((elapsed % 60)) "$status"
  if [[ $status -ne 0 ]]; then
    failed_runs=$((failed_runs + 1))
    grep -E '^(FAILED|ERROR) ' "$logs/run-$run.log" | sed 's/^/  /' || true
  fi
done
echo "logs: $logs"
if [[ $failed_runs -ne 0 ]]; then
  echo "$failed_runs of $runs runs failed"
  exit 1
fi
