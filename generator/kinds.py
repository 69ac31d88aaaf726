"""The three job kinds of seed §2.2 as one typed table: how each is rendered and applied, and
which spec fields mean something for it. Code asks the table; it never branches on a kind."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.identity import JobKind, Role


@dataclass(frozen=True)
class KindTraits:
    """How one job kind is rendered, and what a spec of that kind may set."""

    kind: JobKind
    template: str  # the Jinja template of its manifests
    api_version: str  # of the object gkr applies, finds and deletes
    object_kind: str
    name_limit: int  # KubeRay derives pod and service names from it (ray-operator constant.go)
    roles: tuple[Role, ...]  # the pods it makes; the GPU pods are `gpu_role`
    needs_cmd: bool
    persistent: bool  # lives until its owner deletes it (seed §4.3)
    fetches_working_dir: bool  # Ray downloads a gs://… working_dir (a RayJob's runtime_env)
    # Its driver runs the preflight gate before cmd (runtime.preflight.gate): a RayJob's.
    gated: bool = False
    # Optional spec fields that mean nothing for this kind, with what to do instead.
    refuses: tuple[tuple[str, str], ...] = ()

    @property
    def gpu_role(self) -> Role:
        return Role.WORKER if Role.WORKER in self.roles else Role.JOB

    @property
    def helper_pods(self) -> int:
        """Pods besides the GPU pods: the Ray head, and a RayCluster's sentinel."""
        return len(self.roles) - 1


_BOUNDED = "a raycluster lives until deleted; use a rayjob for a bounded run"
_RESERVES = "only a rayjob releases nodes it could reserve"
_LEARNERS = "a DiLoCo experiment's learners are rayjobs: use kind: rayjob"
# The gate is a RayJob's driver; the other kinds' nodes are checked with `gkr check NODE`.
_GATED = "only a rayjob is gated by the preflight (its driver runs it); `gkr check NODE` checks"

KINDS: dict[str, KindTraits] = {
    JobKind.RAYJOB: KindTraits(
        JobKind.RAYJOB, "rayjob.yaml.j2", "ray.io/v1", "RayJob", 47, (Role.HEAD, Role.WORKER),
        needs_cmd=True, persistent=False, fetches_working_dir=True, gated=True,
    ),
    JobKind.RAYCLUSTER: KindTraits(
        JobKind.RAYCLUSTER, "raycluster.yaml.j2", "ray.io/v1", "RayCluster", 53,
        (Role.HEAD, Role.WORKER, Role.SENTINEL),
        # A RayCluster has no runtime_env: jobs submitted to it bring their own.
        needs_cmd=False, persistent=True, fetches_working_dir=False,
        refuses=(
            ("cmd", "a raycluster runs no command; submit work to it with `ray job submit`"),
            ("retries", "a raycluster is not retried; KubeRay replaces failed pods"),
            ("deadline", _BOUNDED), ("ttl", _BOUNDED),
            ("relaunch_reservation", _RESERVES), ("diloco", _LEARNERS),
            ("preflight", f"{_GATED} a raycluster's nodes"),
        ),
    ),
    JobKind.JOB: KindTraits(
        JobKind.JOB, "job.yaml.j2", "batch/v1", "Job", 63, (Role.JOB,),
        needs_cmd=True, persistent=False, fetches_working_dir=False,
        refuses=(
            ("head", "a job has no Ray head; head is for rayjob and raycluster"),
            ("relaunch_reservation", _RESERVES), ("diloco", _LEARNERS),
            ("preflight", f"{_GATED} a job's nodes"),
        ),
    ),
}


def sentinel_name(job: str) -> str:
    """The Deployment that watches a persistent RayCluster's head."""
    return f"{job}-sentinel"
