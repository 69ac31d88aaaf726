"""The loop every training rank runs under Ray Train: one worker per GPU (or CPU rank).

Rank 0 first runs the auxiliary-worker coordinator (seed §5.4) and shares the services'
handles with every rank. Each rank then builds the configured task, model, optimizer and
schedule (runtime.components), lays the model out on the device mesh (runtime.parallel:
FSDP2, HSDP, tensor parallelism), and takes optimizer steps of `step.grad_accum`
micro-batches, each the task's loss of one batch. Before the first step the run
resumes from a checkpoint when there is one (after Ray Train restarted the worker group,
the newest one the run committed); after each committed step the rank appends the samples
it trained to the sample ledger (runtime.telemetry.ledger), then the hooks run: the
FleetMonitor reporter on rank 0, then the checkpoint manager. Rank 0 records progress,
checkpoints and fleet summaries in the run's progress actor, which the driver prints.

With fault tolerance on (runtime.ft), this worker group is one torchft replica group: the
driver runs the services for all groups, a step may be discarded (a group failed during it)
and the lowest group in the quorum speaks for the run; `Replica` hides the difference.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist

from runtime.aux.client import ServiceHandle
from runtime.aux.coordinator import AuxCoordinator
from runtime.checkpoint.manager import CheckpointHook
from runtime.checkpoint.training import TrainState
from runtime.crash.capture import rank_failures
from runtime.data.aux_producer import remote_source
from runtime.data.config import DataConfig
from runtime.data.schedule import Span
from runtime.data.sources import build_datasets
from runtime.diloco.learner import learner_for
from runtime.fleet import FleetReporter, FleetSink, monitor_name, report_interval
from runtime.ft.replica import Replica, ReplicaSpec, replica_for
from runtime.parallel.apply import flops_per_token
from runtime.planner import CapacityPlan
from runtime.run.batches import BatchSource, training_data
from runtime.run.checkpointing import CheckpointManager, ResumePoint, aux_hooks, restart_point
from runtime.run.config import TrainConfig
from runtime.run.progress import ProgressRecorder
from runtime.tasks.base import Task, TaskContext
from runtime.telemetry.ledger import LedgerWriter, on_this_node
from runtime.train.check import meta_init
from runtime.train.evaluate import Evaluator
from runtime.train.numa import pin_to_numa_node
from runtime.train.step import Meter, Stepper, Taken, rank_loggers
from runtime.train.telemetry import Destination, RankTelemetry, route_inspector_dumps

log = logging.getLogger(__name__)
StepHook = Callable[[int], None]


@dataclass(frozen=True)
class LoopContext:
    """What the driver gives every rank."""

    config: TrainConfig
    plan: CapacityPlan
    run_id: str
    resume: ResumePoint | None = None
    telemetry: Destination | None = None  # None: telemetry off
    # With fault tolerance: the driver's services and their (save-only) checkpoint hooks,
    # and this worker group's replica group. None: rank 0 starts the services; no torchft.
    services: dict[str, ServiceHandle] | None = None
    hooks: tuple[CheckpointHook, ...] = ()
    replica: ReplicaSpec | None = None
    ledger: Path | None = None  # the sample ledger's folder (runtime.telemetry.ledger); None: off


Services = dict[str, ServiceHandle]


def train_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train entry point of every rank; a rank that raises leaves its own report in the
    run's crash bundle (runtime.crash.capture)."""
    context: LoopContext = loop_config["context"]
    group = context.replica.index if context.replica is not None else -1
    rank = ray.train.get_context().get_world_rank()
    with rank_failures(context.config, context.run_id, rank, group):
        _run_rank(loop_config)


def _run_rank(loop_config: dict[str, Any]) -> None:
    context: LoopContext = loop_config["context"]
    config = context.config
    logging.getLogger("runtime").setLevel(config.logging.level)
    train_context = ray.train.get_context()
    rank = train_context.get_world_rank()
    if config.layout.numa_affinity:
        pin_to_numa_node(train_context.get_local_rank())  # logs the node it chose, and why
    if context.telemetry is not None:
        route_inspector_dumps(context.run_id)  # before the rank's first NCCL collective
    coordinator, services = _start_services(context, rank)
    try:
        with replica_for(config, context.run_id, context.replica) as replica:
            _train(context, services, rank, coordinator, replica)
    finally:
        if coordinator is not None:
            coordinator.shutdown()


def _start_services(context: LoopContext, rank: int) -> tuple[AuxCoordinator | None, Services]:
    """Rank 0 places and starts the auxiliary services; every rank receives their handles.
    With fault tolerance the driver has started them."""
    if context.services is not None:
        return None, context.services
    coordinator: AuxCoordinator | None = None
    shared: list[Services | None] = [None]
    if rank == 0:
        coordinator = AuxCoordinator(context.run_id, context.config.aux, context.plan)
        try:
            shared[0] = coordinator.start()
        except BaseException:
            coordinator.shutdown()
            raise
    dist.broadcast_object_list(shared, src=0)
    return coordinator, shared[0] or {}


def _train(
    context: LoopContext, services: Services, rank: int, coordinator: AuxCoordinator | None,
    replica: Replica,
) -> None:
    config = context.config
    who = _global_rank(context, rank)
    task: Task = config.task.build("task")
    task.start(TaskContext(context.run_id, who, _ranks(context), _leads(context, rank),
                           report_interval(config.aux.report_interval_s, _ranks(context)),
                           services, bytes_per_token(training_data(config))))
    torch.manual_seed(config.run.seed)  # every rank builds the same initial weights
    with torch.device("meta") if meta_init(config) else nullcontext():
        built = config.model.build("model")
    model = replica.model(built)
    optimizer = config.optim.build("optim", model.parameters())
    schedule = config.lr_schedule.build("lr_schedule", optimizer) if config.lr_schedule \
        else None
    stepper = replica.optimizer(optimizer)  # torchft's wrapper: quorum, then commit vote
    batches = _batches(config, services, replica, rank, who)
    state = TrainState(model, optimizer, batches, schedule)
    checkpoint = CheckpointManager(config.checkpoint, state,
                                   [*aux_hooks(coordinator), *context.hooks], context.run_id,
                                   replica.replica_group)
    telemetry = _telemetry(context, who, model)
    diloco = learner_for(config.diloco, model, rank)  # a no-op unless a DiLoCo learner
    loggers = rank_loggers(config, rank)
    step_fn = Stepper(config, model, stepper, task, batches, telemetry)
    recorder = _recorder(context, rank, task)

    def speaker() -> ProgressRecorder | None:
        """The recorder while this rank speaks for the run (torchft: it may change)."""
        return recorder if replica.leads() else None

    evaluator = Evaluator(config, model, task, rank, step_fn.device, speaker, loggers.log)
    ledger = RankLedger(context, replica, who)
    with closing(batches), closing(task), checkpoint, _closing(telemetry), closing(diloco), \
            closing(loggers), closing(evaluator), closing(ledger):
        point = restart_point(config, context.run_id, context.resume)
        done = replica.resume(state, checkpoint.resume(point))
        diloco.join()  # the shared weights replace the resumed ones
        _note_restart(context, recorder, point)
        hooks = [diloco.after_step, evaluator.after_step,
                 *_step_hooks(context, services, checkpoint, recorder, telemetry)]
        meter = Meter(config, speaker, task, loggers)
        for attempt in replica.steps(done, config.run.steps):
            taken = step_fn()
            step = replica.committed(attempt)
            if step is None:
                continue  # discarded: a replica group failed during it (torchft)
            ledger.record(step, batches.taken())
            if schedule is not None:
                schedule.step()
            if telemetry is not None:
                _measure_flops(telemetry, model, config, task, taken)
                telemetry.step(step, taken.loss, taken.samples, taken.targets)
            meter.step(step, taken)
            for hook in hooks:
                hook(step)
        _final_report(context, services, recorder, telemetry)
    if recorder is not None:
        recorder.flush()


class RankLedger:
    """This rank's sample ledger (runtime.telemetry.ledger), or nothing when off: a file per
    lineage. The first opens at the first committed step: only then is the replica's origin
    known (a torchft group heals from a peer before it), `started` when training started. A
    group that heals after it trained takes its peer's lineage: a new file, started then,
    so that the verdict drops the steps it trained alone."""

    def __init__(self, context: LoopContext, replica: Replica, rank: int) -> None:
        self.context, self.replica, self.rank = context, replica, rank
        self.started = time.time_ns()
        self.writer: LedgerWriter | None = None

    def record(self, step: int, spans: list[Span]) -> None:
        """A committed step's spans (none when no batch was taken)."""
        if self.context.ledger is None or not spans:
            return
        origin = self.replica.origin()
        if self.writer is not None and self.writer.origin != (origin.kind, origin.step):
            self.writer.close()
            self.writer, self.started = None, time.time_ns()
        if self.writer is None:
            self.writer = LedgerWriter(on_this_node(self.context.ledger), self.context.run_id,
                                       ledger_group(self.context), self.rank, origin.kind,
                                       origin.step, started=self.started)
        self.writer.record(step, spans)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def ledger_group(context: LoopContext) -> int:
    """The ledger's `group`: the torchft replica group, or the DiLoCo learner's index (its
    shard of the stream), else -1."""
    if context.replica is not None:
        return context.replica.index
    diloco = context.config.diloco
    return diloco.index if diloco is not None and diloco.enabled else -1


def _measure_flops(telemetry: RankTelemetry, model: torch.nn.Module, config: TrainConfig,
                   task: Task, taken: Taken) -> None:
    """Once, from the first step's tokens per sample (the sequence length): the FLOPs one
    token costs this rank's device, for MFU (a tensor-parallel group shares its tokens)."""
    if telemetry.flops_per_token is not None or task.unit != "tokens" or not taken.samples:
        return
    seq_len = max(round(taken.targets / taken.samples), 1)
    flops = flops_per_token(getattr(model, "module", model), seq_len)  # DDP holds `module`
    if flops is not None:
        telemetry.flops_per_token = flops / config.layout.tp


def bytes_per_token(data: DataConfig) -> float | None:
    """The mixture's mean bytes per token, when every dataset says its own (token shards
    do); building them here also prepares shards made on first use, before any producer."""
    datasets = build_datasets(data)
    each = [getattr(dataset, "bytes_per_token", None) for dataset in datasets]
    known = [float(value) for value in each if isinstance(value, (int, float))]
    if len(known) != len(each):
        return None
    weights = [source.weight for source in data.datasets]
    return float(np.average(known, weights=weights))


def _leads(context: LoopContext, rank: int) -> bool:
    """Rank 0 of the lowest replica group: it pushes weight refreshes."""
    return rank == 0 and (context.replica is None or context.replica.index == 0)


def _batches(
    config: TrainConfig, services: Services, replica: Replica, rank: int, who: int
) -> BatchSource:
    """This rank's batches. With `data.producer_service` its producers fetch through that
    auxiliary service as rank `who`."""
    name = config.data.producer_service if config.data is not None else None
    source = remote_source(services[name], who) if name is not None else None
    return replica.batches(config, rank, source)


def _ranks(context: LoopContext) -> int:
    """Training ranks of the run, over every replica group."""
    ft = context.config.fault_tolerance
    groups = ft.replica_groups if ft.enabled else 1
    return ray.train.get_context().get_world_size() * groups


def _global_rank(context: LoopContext, rank: int) -> int:
    """The rank across replica groups, as torchft numbers it (group index x group size +
    rank in the group); the worker-group rank without fault tolerance."""
    if context.replica is None:
        return rank
    return context.replica.index * ray.train.get_context().get_world_size() + rank


def _telemetry(context: LoopContext, rank: int, model: torch.nn.Module) -> RankTelemetry | None:
    """This rank's telemetry, timing the model's gradient all-reduces; None when off."""
    if context.telemetry is None:
        return None
    train = ray.train.get_context()
    world, local = train.get_world_size(), train.get_local_world_size()
    if context.replica is not None:
        world *= context.config.fault_tolerance.replica_groups
    telemetry = RankTelemetry(context.config, context.telemetry, context.run_id, rank, world,
                              nnodes=max(world // max(local, 1), 1))
    if context.replica is None:  # torchft's DDP holds the model's one communication hook
        telemetry.watch(model)
    return telemetry


def _closing(telemetry: RankTelemetry | None) -> AbstractContextManager[Any]:
    return closing(telemetry) if telemetry is not None else nullcontext()


def _recorder(context: LoopContext, rank: int, task: Task) -> ProgressRecorder | None:
    """Rank 0's progress recorder."""
    if rank != 0:
        return None
    return ProgressRecorder(context.run_id, context.config.run.steps, task.unit, task.loss_unit)


def _note_restart(
    context: LoopContext, recorder: ProgressRecorder | None, point: ResumePoint | None
) -> None:
    """Say so when Ray Train restarted the worker group and it resumed from a newer
    checkpoint than the run started from."""
    if recorder is not None and point is not None and point != context.resume:
        recorder.notice(f"worker group restarted after a failure: resuming from {point.uri} "
                        f"(step {point.step}), the newest checkpoint this run committed")


def _checkpoint_hook(
    context: LoopContext, checkpoint: CheckpointManager, recorder: ProgressRecorder | None
) -> StepHook:
    """Save when due; rank 0 records each checkpoint it starts."""
    section = context.config.checkpoint
    background = section is not None and section.async_save

    def after_step(step: int) -> None:
        if checkpoint.after_step(step) and recorder is not None:
            recorder.checkpoint(step, background)

    return after_step


def _reporter(
    context: LoopContext, services: Services, recorder: ProgressRecorder | None,
    telemetry: RankTelemetry | None,
) -> FleetReporter | None:
    if recorder is None or not services:  # only rank 0 has a recorder
        return None
    if context.replica is not None and context.replica.index != 0:
        return None  # the services are shared: replica group 0 reports on them
    named: dict[str, FleetSink | None] = {"log": recorder, "telemetry": telemetry}
    sinks = [sink for name in context.config.logging.sinks if (sink := named[name]) is not None]
    monitor = ray.get_actor(monitor_name(context.run_id))
    return FleetReporter(monitor, sinks, context.config.logging.fleet_every_steps)


def _step_hooks(
    context: LoopContext,
    services: Services,
    checkpoint: CheckpointManager,
    recorder: ProgressRecorder | None,
    telemetry: RankTelemetry | None,
) -> list[StepHook]:
    """What runs after each optimizer step: the fleet report (rank 0), then checkpointing."""
    reporter = _reporter(context, services, recorder, telemetry)
    fleet = [reporter.after_step] if reporter else []
    return [*fleet, _checkpoint_hook(context, checkpoint, recorder)]


def _final_report(
    context: LoopContext, services: Services, recorder: ProgressRecorder | None,
    telemetry: RankTelemetry | None,
) -> None:
    """A last summary, unless the periodic report has just covered the final step."""
    reporter = _reporter(context, services, recorder, telemetry)
    steps = context.config.run.steps
    if reporter is not None and not (reporter.every and steps % reporter.every == 0):
        reporter.report(steps)
