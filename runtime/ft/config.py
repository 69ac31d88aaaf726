"""Settings of live fault tolerance with torchft (the `fault_tolerance` section of a training
config, seed §7.2). Off by default: the run then recovers the §7.1 way, by Ray Train restarting
the worker group from the last committed checkpoint (`run.max_failures`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.identity import WARDEN_TEMPORAL_NAMESPACE, Env


class FaultToleranceConfig(BaseModel):
    """Replica groups that survive each other's failures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(False, description="Train as torchft replica groups.")
    replica_groups: int = Field(
        2, ge=1, description="Replica groups started; the world size is this times the group "
                             "size the planner picks.")
    min_replica_groups: int = Field(
        1, ge=1, description="Training goes on while at least this many groups are in the "
                             "quorum; below it the run stops.")
    quorum_timeout_s: float = Field(
        60.0, gt=0, description="How long a group waits for a quorum of `min_replica_groups` "
                                "before the run stops.")
    timeout_s: float = Field(
        30.0, gt=0, description="Timeout of a cross-group all-reduce, a commit vote and a "
                                "checkpoint transfer to a healing group.")
    heartbeat_timeout_s: float = Field(
        5.0, gt=0, description="Missing heartbeats for this long drop a group from the quorum.")
    watchdog_timeout_s: float = Field(
        5.0, gt=0, description="A rank silent for this long takes its whole replica group "
                               "out of the quorum (the liveness watchdog).")
    join_timeout_s: float = Field(
        30.0, gt=0, description="How long the Lighthouse waits for every live group to join a "
                                "new quorum before forming it without the late ones.")
    worker_group: str = Field(
        "workers", min_length=1, description="The RayCluster worker group Warden shrinks when "
                                             "a replica group is dropped.")
    warden_address: str | None = Field(
        None, description=f"Warden's Temporal frontend (host:port); None: "
                          f"{Env.TEMPORAL_ADDRESS}, and without it shrink requests are only "
                          "recorded (a local run).")
    warden_namespace: str = Field(WARDEN_TEMPORAL_NAMESPACE,
                                  description="Warden's Temporal namespace.")
    warden_task_queue: str = Field("warden", min_length=1, description="Warden's task queue.")

    @model_validator(mode="after")
    def _minimum_fits(self) -> FaultToleranceConfig:
        if self.min_replica_groups > self.replica_groups:
            raise ValueError(f"min_replica_groups ({self.min_replica_groups}) exceeds "
                             f"replica_groups ({self.replica_groups})")
        return self
