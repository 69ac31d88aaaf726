"""The typed training configuration: one section per component, validated when built.

`data` and `checkpoint` are owned by their components (`runtime.data`, `runtime.checkpoint`);
`aux` by `runtime.aux`. Errors name the source file and the field path.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from runtime.aux.config import AuxConfig
from runtime.checkpoint.config import CheckpointConfig
from runtime.components import Component
from runtime.config_errors import config_error
from runtime.crash.config import CrashConfig
from runtime.data.config import PRODUCER_SERVICE_IMPL, DataConfig
from runtime.diloco.config import DilocoConfig
from runtime.ft.config import FaultToleranceConfig
from runtime.telemetry.config import TelemetryConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(_Section):
    """Identity and length of the run, and where Ray runs."""

    name: str = Field("train", pattern=r"^[a-z0-9][a-z0-9-]{0,39}$", description="Run name.")
    seed: int = Field(0, ge=0, description="Seed of the model's initial weights.")
    steps: int = Field(100, ge=1, description="Optimizer steps to run.")
    log_every: int = Field(10, ge=1, description="Steps between progress lines.")
    ray_address: str | None = Field(None, description="Ray cluster to join; None: start one.")
    local_cpus: int = Field(4, ge=1, description="Logical CPUs of a locally started Ray.")
    max_failures: int = Field(
        0, ge=-1, description="Times Ray Train restarts a failed worker group from the last "
                              "committed checkpoint (per replica group with fault_tolerance); "
                              "-1: no limit.")


def _component(target: str, **kwargs: Any) -> Any:
    """A default component section (a factory, so that defaults are never shared)."""
    return lambda: Component.model_validate({"_target_": target, **kwargs})


# The built-in toy: an MLP distilling a frozen teacher (the local one or an aux service).
DEFAULT_TASK = "runtime.tasks.distill.Distillation"
DEFAULT_MODEL = "runtime.models.mlp.MLP"


class StepSection(_Section):
    """How one optimizer step is taken."""

    grad_accum: int = Field(1, ge=1, le=4096,
                            description="Micro-batches whose gradients one step sums.")
    clip_grad_norm: float | None = Field(
        None, gt=0, description="Clip the global gradient norm to this; None: no clipping.")


class EvalSection(_Section):
    """Held-out loss, measured every `every_steps` on `batches` batches of `data`."""

    every_steps: int = Field(0, ge=0, description="Steps between evaluations; 0: never.")
    batches: int = Field(4, ge=1, description="Batches per rank in one evaluation.")
    data: DataConfig | None = Field(None, description="The held-out data; required when on.")

    @model_validator(mode="after")
    def _data_when_on(self) -> EvalSection:
        if self.every_steps and self.data is None:
            raise ValueError("eval.every_steps is set, so eval.data is required")
        return self


class LayoutSection(_Section):
    """The device mesh (replicate x shard x tensor), how FSDP2 runs, what one rank occupies.

    The world is dp_replicate x dp_shard x tp ranks (torchtitan's names). With
    fault_tolerance the replica groups are the replicate dimension: dp_replicate stays 1
    and each group is dp_shard x tp ranks."""

    dp_replicate: int = Field(1, ge=-1, description="Replicas of the model (HSDP's outer dim; "
                                                    "-1: the rest of the world).")
    dp_shard: int = Field(-1, ge=-1, description="FSDP2 shards per replica; -1: the rest.")
    tp: int = Field(1, ge=1, description="Tensor-parallel degree.")
    pp: int = Field(1, ge=1, le=1, description="Pipeline-parallel degree (not built: 1).")
    cp: int = Field(1, ge=1, le=1, description="Context-parallel degree (not built: 1).")
    param_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="FSDP2's compute dtype of the parameters (mixed precision).")
    reduce_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="FSDP2's dtype of the gradient reduce-scatter.")
    activation_checkpointing: Literal["none", "full"] = Field(
        "none", description="Recompute each block's activations in the backward pass.")
    compile: bool = Field(False, description="torch.compile each block.")
    meta_init: bool | None = Field(
        None, description="Build the model on the meta device and initialise it after "
                          "sharding (its init_weights), so no rank ever holds the whole "
                          "model (a 70B model is 280 GB in float32); None: on GPUs, for "
                          "models with init_weights.")
    max_world_size: int | None = Field(None, ge=1, description="Cap on training workers.")
    gpus_per_worker: Literal[0, 1] = Field(1, description="1: one whole GPU per rank; 0: CPU.")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs per training worker.")
    backend: Literal["nccl", "gloo"] | None = Field(
        None, description="torch.distributed backend; None: nccl on GPU, gloo on CPU."
    )
    numa_affinity: bool = Field(True, description="Pin each rank to its NUMA node's CPUs.")

    @property
    def multiple(self) -> int:
        """The world size must be a multiple of this."""
        return max(self.dp_replicate, 1) * max(self.dp_shard, 1) * self.tp * self.pp * self.cp


class LoggingSection(_Section):
    """Log level, what the driver shows, and how often FleetMonitor summaries are reported."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    fleet_every_steps: int = Field(20, ge=0, description="Steps between summaries; 0: at end.")
    sinks: list[Literal["log", "telemetry"]] = Field(
        ["log", "telemetry"],
        description="Where fleet summaries go (`log`: the driver's output; `telemetry`: the "
                    "store, when the telemetry section is enabled).",
    )
    forward_worker_logs: bool = Field(
        True, description="Ray prints every worker's output on the driver; off: progress only."
    )


class TrainConfig(_Section):
    """A whole training run."""

    run: RunSection = Field(default_factory=RunSection, description="Run identity and length.")
    task: Component = Field(default_factory=_component(DEFAULT_TASK),
                            description="What is learnt: the loss, metrics, and the model's "
                                        "contract (runtime.tasks).")
    model: Component = Field(default_factory=_component(DEFAULT_MODEL),
                             description="The network (runtime.models or your own).")
    tokenizer: Component | None = Field(None, description="The text tokenizer, if any.")
    data: DataConfig | None = Field(None, description="Loader pipeline; None: synthetic.")
    optim: Component = Field(default_factory=_component("torch.optim.AdamW", lr=3e-3),
                             description="The optimizer, called with the parameters first.")
    lr_schedule: Component | None = Field(
        None, description="Called with the optimizer first; returns an LRScheduler.")
    step: StepSection = Field(default_factory=StepSection, description="One optimizer step.")
    eval: EvalSection = Field(default_factory=EvalSection, description="Held-out loss.")
    loggers: list[Component] = Field(
        default_factory=list, description="Metric loggers of rank 0 (runtime.train.loggers).")
    layout: LayoutSection = Field(default_factory=LayoutSection, description="Parallelism.")
    aux: AuxConfig = Field(default_factory=AuxConfig, description="Auxiliary services.")
    checkpoint: CheckpointConfig | None = Field(None, description="Checkpointing; None: off.")
    logging: LoggingSection = Field(default_factory=LoggingSection, description="Logging.")
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig, description="Telemetry.")
    crash: CrashConfig = Field(default_factory=CrashConfig,
                               description="Crash bundles of a failed run (seed §7.4).")
    diloco: DilocoConfig = Field(default_factory=DilocoConfig,
                                 description="This run as a DiLoCo learner (seed §6).")
    fault_tolerance: FaultToleranceConfig = Field(
        default_factory=FaultToleranceConfig, description="torchft replica groups (seed §7.2).")

    @model_validator(mode="after")
    def _target_service_exists(self) -> TrainConfig:
        target = self.task.kwargs.get("target_service")
        if target is not None and target not in self.aux.services:
            known = ", ".join(sorted(self.aux.services)) or "none configured"
            raise _field_error(("task", "target_service"),
                               f"{target!r} is not in aux.services; allowed: {known}", target)
        return self

    @model_validator(mode="after")
    def _producer_service_serves_this_data(self) -> TrainConfig:
        """`data.producer_service` names a producer service that serves these samples."""
        name = self.data.producer_service if self.data is not None else None
        if name is None:
            return self
        assert self.data is not None
        if name not in self.aux.services:
            known = ", ".join(sorted(self.aux.services)) or "none configured"
            raise _field_error(("data", "producer_service"),
                               f"{name!r} is not in aux.services; allowed: {known}", name)
        service = self.aux.services[name]
        if service.impl != PRODUCER_SERVICE_IMPL:
            raise _field_error(("aux", "services", name, "impl"),
                               f"data.producer_service names this service, so it must be a "
                               f"producer service; allowed: {PRODUCER_SERVICE_IMPL}",
                               service.impl)
        _check_served_data(name, service.options.get("data"), self.data)
        return self

    @model_validator(mode="after")
    def _replica_groups_fit(self) -> TrainConfig:
        ft = self.fault_tolerance
        if not ft.enabled:
            return self
        if self.data is None:
            raise ValueError("fault_tolerance.enabled needs a `data` section: replica groups "
                             "share out the loader's global sample stream")
        if self.diloco.enabled:
            raise ValueError("fault_tolerance.enabled and diloco.enabled exclude each other")
        if self.layout.dp_replicate > 1:
            raise _field_error(("layout", "dp_replicate"), "allowed with fault_tolerance: 1 or "
                               "-1 (a group's ranks): the replica groups are the replicate "
                               "dimension (set fault_tolerance.replica_groups)",
                               self.layout.dp_replicate)
        smallest = ft.replica_groups * self.layout.multiple
        cap = self.layout.max_world_size
        if cap is not None and cap < smallest:
            raise ValueError(f"layout.max_world_size ({cap}) is below fault_tolerance."
                             f"replica_groups x the layout's fixed dimensions ({smallest})")
        return self


def _check_served_data(service: str, served: object, data: DataConfig) -> None:
    """The producer service's `data` option must give the samples of the `data` section."""
    loc = ("aux", "services", service, "options", "data")
    fix = "write `data: ${data}` (the data section itself)"
    if not isinstance(served, dict):
        raise _field_error(loc, f"required: the data section its workers serve; {fix}", served)
    try:
        serves = DataConfig.model_validate(served)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _field_error(loc, f"not a data section ({where}: {first['msg']}); {fix}",
                           served) from error
    differ = [field for field in ("datasets", "transform")
              if getattr(serves, field) != getattr(data, field)]
    if differ:
        verb = "differs" if len(differ) == 1 else "differ"
        raise _field_error(loc, f"its {' and '.join(differ)} {verb} from the data section's, "
                                f"so the workers would serve other samples; {fix}", served)


def _field_error(loc: tuple[str, ...], message: str, value: object) -> ValidationError:
    """An error at field path `loc` (a model validator's own errors carry none)."""
    problem = InitErrorDetails(type=PydanticCustomError("invalid_value", message), loc=loc,
                               input=value)
    return ValidationError.from_exception_data(TrainConfig.__name__, [problem])


def build_config(raw: dict[str, Any], source: str = "config") -> TrainConfig:
    """Validate a plain mapping; every error names its field path and what is allowed."""
    try:
        return TrainConfig.model_validate(raw)
    except ValidationError as error:
        raise config_error(error, source, TrainConfig) from error
