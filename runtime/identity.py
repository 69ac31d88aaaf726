"""The one vocabulary of who is who: job, team, run, learner, replica group, rank, role, pod, node.

Every `gkr.dev/` label, annotation and taint key and every `GKR_*` environment name is spelled
here and nowhere else in hand-written code (a test enforces it). The generator writes these
keys into manifests, the cluster commands select pods by them, Warden reads and writes them on
nodes, and the runtime reads the environment they become, so a metric, a pod and a node can
always be joined.

This module imports nothing from the rest of the project: the images, the generator and
Warden all depend on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Final

DOMAIN: Final = "gkr.dev"
MANAGED_BY: Final = ("app.kubernetes.io/managed-by", "gkr")
# Warden's Temporal namespace: the default of every client and worker of Warden (the runtime's
# shrink requests, gkr warden, gkr-ui, Warden itself); the Temporal add-on creates it
# (platform/catalog/addons.yaml, held equal by tests/warden/test_warden_manifests.py).
WARDEN_TEMPORAL_NAMESPACE: Final = "warden"


class JobKind(StrEnum):
    """The three submission types of seed §2.2."""

    RAYJOB = "rayjob"
    RAYCLUSTER = "raycluster"
    JOB = "job"


class Role(StrEnum):
    """What a pod does within its job."""

    HEAD = "head"  # the Ray head (CPU pool; runs the driver)
    WORKER = "worker"  # a Ray worker on a GPU node
    JOB = "job"  # a pod of a batch/v1 Job
    SENTINEL = "sentinel"  # the watcher of a persistent RayCluster (seed §4.3)
    CHECK = "check"  # a node check: the preflight suite pinned to one node


class Label:
    """Label keys GKR puts on the objects it makes (selectable)."""

    JOB: Final = f"{DOMAIN}/job"
    KIND: Final = f"{DOMAIN}/kind"
    TEAM: Final = f"{DOMAIN}/team"
    ROLE: Final = f"{DOMAIN}/role"
    CLUSTER: Final = f"{DOMAIN}/cluster"
    RUN: Final = f"{DOMAIN}/run"  # the logical run several jobs share (a DiLoCo experiment)
    LEARNER: Final = f"{DOMAIN}/learner"  # which learner of that run a job is
    TIER: Final = f"{DOMAIN}/tier"  # on PriorityClasses


class Annotation:
    """Annotation keys on jobs, pods and nodes (not selectable; free-form values)."""

    OWNER: Final = f"{DOMAIN}/owner"
    SOURCE: Final = f"{DOMAIN}/source"  # the spec file a manifest was rendered from
    NODE: Final = f"{DOMAIN}/node"  # the node a check Job examines
    RAYCLUSTER: Final = f"{DOMAIN}/raycluster"  # on a sentinel: the RayCluster it watches
    # Relaunch reservations (seed §4.3): asked for on the RayJob, kept by Warden on nodes.
    RELAUNCH_RESERVATION_SECONDS: Final = f"{DOMAIN}/relaunch-reservation-seconds"
    RESERVATION_JOB: Final = f"{DOMAIN}/reservation-job"  # `<ns>/<name>` running on the node
    RESERVATION_SECONDS: Final = f"{DOMAIN}/reservation-seconds"
    RESERVED_UNTIL: Final = f"{DOMAIN}/reserved-until"  # RFC 3339, UTC
    RESERVED_BY: Final = f"{DOMAIN}/reserved-by"  # `<ns>/<name>`; marks the taint as Warden's
    # On a RayJob: JSON of its preflight gate's latest result (runtime.preflight.GateRecord),
    # written by Warden (job pods hold no Kubernetes credentials) and read by `gkr status`.
    PREFLIGHT: Final = f"{DOMAIN}/preflight"


class Taint:
    """Taint keys GKR puts on nodes."""

    RESERVED_FOR: Final = f"{DOMAIN}/reserved-for"  # value: the namespace the node is kept for


class Warden:
    """Warden's memory on nodes and objects (seed §7.3): survives incidents and restarts."""

    PREFIX: Final = f"warden.{DOMAIN}/"
    CORDONS: Final = PREFIX + "cordons"
    RECENT_CORDONS: Final = PREFIX + "recent-cordons"
    LAST_CORDON: Final = PREFIX + "last-cordon"
    REASON: Final = PREFIX + "reason"
    STATE: Final = PREFIX + "state"
    INCIDENT: Final = PREFIX + "incident"
    POWER: Final = PREFIX + "power"
    CORDONED_BY: Final = PREFIX + "cordoned-by"
    CLEARED: Final = PREFIX + "cleared"  # the suspect signals a passed node check cleared
    CLEARED_UNTIL: Final = PREFIX + "cleared-until"  # RFC 3339, UTC: when they count again
    SHRINK_REQUESTS: Final = PREFIX + "shrink-requests"  # on a RayCluster
    CHECK_RUN: Final = PREFIX + "run"  # on a check Job: the workflow run that started it
    # On a workload Warden will drain: JSON of the node, the reason, the deadline and the pods.
    DRAIN: Final = PREFIX + "drain"


class Env:
    """Environment names a GKR pod or process reads."""

    CLUSTER: Final = "GKR_CLUSTER"
    NAMESPACE: Final = "GKR_NAMESPACE"
    TEAM: Final = "GKR_TEAM"
    JOB: Final = "GKR_JOB"
    KIND: Final = "GKR_KIND"
    ACCELERATOR: Final = "GKR_ACCELERATOR"
    ROLE: Final = "GKR_ROLE"
    RUN: Final = "GKR_RUN"
    LEARNER: Final = "GKR_LEARNER"
    POD: Final = "GKR_POD"  # from the downward API
    NODE: Final = "GKR_NODE"  # from the downward API
    POD_IP: Final = "GKR_POD_IP"  # from the downward API (status.podIP): where listeners bind
    PREFLIGHT: Final = "GKR_PREFLIGHT"  # the preflight's expectations, JSON
    # A RayJob's head: the gate's settings (JSON of runtime.preflight.gate.GateConfig), and
    # the job's cmd, which the gate runs (/bin/sh -c) once every pod passed.
    PREFLIGHT_GATE: Final = "GKR_PREFLIGHT_GATE"
    ENTRYPOINT: Final = "GKR_ENTRYPOINT"
    # Set only by tests, in one "pod": `fail` makes its ranks fail after the rendezvous,
    # `slow:S` makes each of their timed all-reduces wait S seconds first (a slow link).
    PREFLIGHT_FAULT: Final = "GKR_PREFLIGHT_FAULT"
    DILOCO: Final = "GKR_DILOCO"  # a DiLoCo learner's or synchroniser's settings, JSON
    TEMPORAL_ADDRESS: Final = "GKR_TEMPORAL_ADDRESS"
    TEMPORAL_NAMESPACE: Final = "GKR_TEMPORAL_NAMESPACE"
    TELEMETRY_DSN: Final = "GKR_TELEMETRY_DSN"  # where telemetry goes (runtime.telemetry)
    # Dense bf16 peak TFLOP/s of one of the pod's GPUs, from the accelerator catalog (for MFU)
    PEAK_TFLOPS: Final = "GKR_PEAK_TFLOPS"
    # The password inside a cluster pod's DSN, from a Secret (generator.telemetry.Telemetry.dsn)
    TELEMETRY_PASSWORD: Final = "GKR_TELEMETRY_PASSWORD"
    # The agent command `gkr diagnose` runs (shell words), over the catalog's `agent.command`.
    AGENT_COMMAND: Final = "GKR_AGENT_COMMAND"
    # Warden's drain notices also go to this incoming webhook (Slack's JSON), from a Secret:
    # the URL's path is its credential, so it is never in the ConfigMap nor in a log line.
    WARDEN_WEBHOOK: Final = "GKR_WARDEN_WEBHOOK_URL"


# The identity field each GKR_* variable carries into a pod (`Workload.env`, `Identity.from_env`).
ENV_FIELDS: Final = {Env.CLUSTER: "cluster", Env.NAMESPACE: "namespace", Env.TEAM: "team",
                     Env.JOB: "job", Env.KIND: "kind", Env.RUN: "run", Env.LEARNER: "learner",
                     Env.ROLE: "role", Env.POD: "pod", Env.NODE: "node"}


LOCAL_HOST: Final = "127.0.0.1"


def listen_host(environ: Mapping[str, str] | None = None) -> str:
    """Where this process's listeners bind and what they advertise: the pod's IP (`POD_IP`)
    where the pod sets it, else loopback (a local run keeps every peer on this machine)."""
    env = os.environ if environ is None else environ
    return env.get(Env.POD_IP) or LOCAL_HOST


def selector(**terms: str) -> str:
    """A Kubernetes equality label selector over GKR's labels: `selector(job="x", role="head")`."""
    return ",".join(f"{getattr(Label, key.upper())}={value}" for key, value in terms.items())


@dataclass(frozen=True)
class Workload:
    """Which job a pod belongs to: fixed when the spec is rendered."""

    cluster: str
    namespace: str
    team: str
    job: str
    kind: JobKind
    run: str = ""  # the logical run, when several jobs share one (seed §6); else none
    learner: str = ""  # which learner of that run this job is; "" for none

    def labels(self) -> dict[str, str]:
        """The selectable labels of every object of this job (the role is added per pod)."""
        shared = {Label.RUN: self.run, Label.LEARNER: self.learner}
        return {MANAGED_BY[0]: MANAGED_BY[1], Label.JOB: self.job, Label.KIND: str(self.kind),
                Label.TEAM: self.team, **{key: value for key, value in shared.items() if value}}

    def env(self) -> dict[str, str]:
        """What a pod of this job learns about itself from its environment (a job of no
        shared run leaves the run to its process)."""
        return {name: str(value) for name, field in ENV_FIELDS.items()
                if (value := getattr(self, field, ""))}


@dataclass(frozen=True)
class Identity:
    """Who produced a metric, a log line or a crash: every telemetry row carries all of it.

    Fields a process cannot know are empty (a driver has no rank; a local run has no pod).
    """

    cluster: str = ""
    namespace: str = ""
    team: str = ""
    job: str = ""
    kind: str = ""
    run: str = ""
    learner: str = ""  # one of several decoupled learners of an experiment (seed §6)
    replica_group: int = -1  # torchft replica group; -1 when not fault-tolerant
    rank: int = -1  # global training rank; -1 for the driver and services
    role: str = ""
    pod: str = ""
    node: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **known: object) -> Identity:
        """The identity a GKR pod was given through its environment, plus what the caller knows
        (`run=`, `rank=`, …): the caller's values win."""
        env = os.environ if environ is None else environ
        values = {field: env[name] for name, field in ENV_FIELDS.items() if name in env}
        return cls(**{**values, **known})  # type: ignore[arg-type]

    def row(self) -> dict[str, object]:
        """The identity columns of a telemetry row."""
        return asdict(self)
