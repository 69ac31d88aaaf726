"""Plain data exchanged between Warden's workflows, activities and clients.

Standard-library dataclasses only: these travel through Temporal's payload converter and are
imported inside the deterministic workflow sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TriggerKind = Literal["fault", "suspect", "recover"]

NODE_WORKFLOW = "WardenNode"
SHRINK_WORKFLOW = "WardenShrink"
SWEEP_WORKFLOW = "WardenSweep"
PREFLIGHT_WORKFLOW = "WardenPreflight"
# The signal key of a node a job's preflight blamed: a node check that clears it holds off
# the next such report for a while, like any suspect's (memory.held_off_until).
PREFLIGHT_SIGNAL = "preflight"


def node_workflow_id(node: str) -> str:
    """The one workflow id of a node: a second trigger for the node joins the running one."""
    return f"warden-node-{node}"


@dataclass(frozen=True)
class Trigger:
    """Why a node workflow was started or signalled."""

    kind: TriggerKind
    reason: str
    source: str = "detection"
    # What raised it, without the values (e.g. "Xid 74", "DCGM_FI_DEV_GPU_TEMP >= 90"): the
    # key of a suspect's hold-off once its check clears it (memory.held_off_until).
    signals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Suspicion:
    """A node that detection found faulty (definite) or suspect (ambiguous)."""

    node: str
    trigger: Trigger


@dataclass(frozen=True)
class NodePolicy:
    """Durations and limits a node workflow uses; fixed at start so replays stay deterministic."""

    drain_grace_s: float
    drain_timeout_s: float
    reboot_timeout_s: float
    repair_timeout_s: float
    check_timeout_s: float
    stress_timeout_s: float
    max_attempts: int
    activity_timeout_s: float
    heartbeat_s: float


@dataclass(frozen=True)
class NodeInput:
    """Input of the node workflow."""

    node: str
    policy: NodePolicy


@dataclass(frozen=True)
class SweepPlan:
    """A periodic sweep: which activity, how often, and when to continue as new."""

    activity: str
    interval_s: float
    iterations: int
    timeout_s: float


@dataclass(frozen=True)
class CheckResult:
    """Outcome of a node check or stress test."""

    passed: bool
    findings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CordonOutcome:
    """What the cordon memory says after a cordon."""

    recent_cordons: int
    escalate: bool


@dataclass(frozen=True)
class Workloads:
    """User pods still on a node: those that block a reboot and those Warden may drain."""

    blocking: list[str] = field(default_factory=list)
    drainable: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PowerRequest:
    """One reboot or repair of a node, keyed so that a retry never repeats it."""

    node: str
    key: str
    action: Literal["reboot", "repair"]
    reason: str


@dataclass(frozen=True)
class Step:
    """One entry in an incident's log."""

    at: str
    what: str


@dataclass
class Incident:
    """The state of a node workflow: its query answer and its result."""

    node: str
    trigger: str
    reason: str
    started: str
    phase: str = "triage"
    recent_cordons: int = 0
    escalated: bool = False
    steps: list[Step] = field(default_factory=list)


@dataclass(frozen=True)
class ShrinkRequest:
    """A request from live fault tolerance to lower a RayCluster worker group."""

    request_id: str
    namespace: str
    cluster: str
    group: str
    remove: int
    workers_to_delete: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScaleRequest:
    """A request from a researcher (`gkr ray scale`) to set a RayCluster worker group's
    replicas; applied by the same patch as a shrink (runtime.warden.shrink)."""

    request_id: str
    namespace: str
    cluster: str
    group: str
    replicas: int


@dataclass(frozen=True)
class ReservationSweep:
    """What one reservation sweep changed, as `node: detail` lines."""

    tracked: list[str] = field(default_factory=list)
    reserved: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ShrinkOutcome:
    """The worker group's replicas after the request, and whether this call changed them."""

    replicas: int
    applied: bool


@dataclass(frozen=True)
class PreflightReport:
    """One result of a job's preflight gate (runtime.preflight.gate), for Warden to record on
    the workload and act on: job pods hold no Kubernetes credentials, Warden does."""

    report_id: str  # one per run of the gate: a repeated report is applied once
    namespace: str
    kind: Literal["Job", "RayJob", "RayCluster"]
    name: str
    record: str  # the workload's preflight annotation (JSON of runtime.preflight.GateRecord)
    suspects: dict[str, str] = field(default_factory=dict)  # node -> why the gate blames it
