"""GKR against a cluster: what `gkr submit/list/status/logs/...` do, on `runtime.kube`.

Each command of `generator.cli` builds one frozen request and calls one function here."""

from generator.cluster.jobs import (
    Deleted,
    DeleteRequest,
    LogsRequest,
    apply_all,
    delete,
    delete_job,
    find_job,
    job_logs,
)
from generator.cluster.prepare import JobsRequest, Prepared, SpecFlags, manifests, prepare_jobs
from generator.cluster.status import JobRow, JobStatus, PodRow, job_status, list_jobs
from generator.cluster.submit import SubmitMode, SubmitOutcome, SubmitRequest, submit_job

__all__ = [
    "DeleteRequest", "Deleted", "JobRow", "JobStatus", "JobsRequest", "LogsRequest", "PodRow",
    "Prepared", "SpecFlags", "SubmitMode", "SubmitOutcome", "SubmitRequest", "apply_all",
    "delete", "delete_job", "find_job", "job_logs", "job_status", "list_jobs", "manifests",
    "prepare_jobs", "submit_job",
]
