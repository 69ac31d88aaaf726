"""GKR against a cluster: the Kubernetes API layer behind `gkr submit/list/status/logs/...`."""

from generator.cluster.api import FIELD_MANAGER, ApiFailed, KubeApi, NotFound
from generator.cluster.status import JobRow, JobStatus, PodRow, job_status, list_jobs
from generator.cluster.submit import SubmitRequest, apply_all, manifests, prepare

__all__ = [
    "FIELD_MANAGER", "ApiFailed", "JobRow", "JobStatus", "KubeApi", "NotFound", "PodRow",
    "SubmitRequest", "apply_all", "job_status", "list_jobs", "manifests", "prepare",
]
