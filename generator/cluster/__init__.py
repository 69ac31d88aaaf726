"""GKR against a cluster: what `gkr submit/list/status/logs/...` do, on `runtime.kube`."""

from generator.cluster.status import JobRow, JobStatus, PodRow, job_status, list_jobs
from generator.cluster.submit import (
    SubmitRequest,
    apply_all,
    delete_job,
    find_job,
    manifests,
    prepare,
    prepare_all,
)

__all__ = [
    "JobRow", "JobStatus", "PodRow", "SubmitRequest", "apply_all", "delete_job", "find_job",
    "job_status", "list_jobs", "manifests", "prepare", "prepare_all",
]
