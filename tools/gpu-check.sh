#!/usr/bin/env bash
# The one-GPU checks (tests/gpu/test_gpu_paths.py) on a machine with an NVIDIA GPU, in under
# 8 minutes, ending with a summary: bf16 FSDP2 trains, compiled blocks match eager, NCCL
# all-reduce, pinned DCP staging, the Checkpointer on CUDA state, a 1-GPU runtime.train.
#
#   tools/gpu-check.sh            # uses .venv (made by `make setup` when missing)
#   PYTHON=/path/to/python tools/gpu-check.sh
#
# `make setup` installs torch==2.13.0 as the machine's pip finds it: PyPI's Linux wheel is
# built with CUDA, a CPU-only mirror's is not. Where the check says torch has no CUDA, put
# PyPI's wheel in the venv:
#   .venv/bin/pip install --force-reinstall torch==2.13.0 --index-url https://pypi.org/simple
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
if [ ! -x "$PY" ]; then
    make setup
fi

if ! "$PY" - <<'EOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu-check: torch {torch.__version__} sees no CUDA device (CUDA build: "
             f"{torch.version.cuda or 'no'}); see the top of tools/gpu-check.sh")
print(f"gpu-check: torch {torch.__version__} (CUDA {torch.version.cuda}) on "
      f"{torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} device(s)")
EOF
then
    exit 2
fi

start=$(date +%s)
status=0
# -rA: one summary line per test (PASSED / FAILED / SKIPPED with its reason).
timeout 480 "$PY" -m pytest tests/gpu/test_gpu_paths.py -rA -q -p no:cacheprovider \
    --durations=0 || status=$?
echo "gpu-check: $(( $(date +%s) - start )) s, exit status ${status}"
exit "${status}"
