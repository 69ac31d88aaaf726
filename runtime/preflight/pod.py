"""One pod's part of the gate: its own checks (kernel log, libraries, NCCL variables, mounts,
compute), then its ranks of the all-reduce between pods.

A pod always joins the all-reduce, even when its own checks failed: its peers would
otherwise wait for it until the rendezvous times out. `python -m runtime.preflight.pod`
reads a `PodTask` as JSON on stdin and prints the `PodOutcome`.
"""

from __future__ import annotations

import sys

from runtime.preflight.allreduce import LocalFault, pod_ranks
from runtime.preflight.suite import run_suite
from runtime.preflight.tasks import PodOutcome, PodTask


def run_pod(task: PodTask) -> PodOutcome:
    """Own checks, then the all-reduce; failures become the outcome, never an exception."""
    local = run_suite(task.checks.model_copy(update={"node": task.node}))
    where = {"index": task.index, "node": task.node, "pod": task.pod, "local": local}
    try:
        return PodOutcome(**where, ranks=pod_ranks(task.index, task.rendezvous))
    except LocalFault as error:
        return PodOutcome(**where, error=str(error), own_fault=True)
    except (RuntimeError, OSError) as error:  # torch.distributed's errors are RuntimeErrors
        return PodOutcome(**where, error=f"{type(error).__name__}: {error}".splitlines()[0])


def main() -> int:
    outcome = run_pod(PodTask.model_validate_json(sys.stdin.read()))
    print(outcome.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
