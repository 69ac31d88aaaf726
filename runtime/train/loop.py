"""The loop every training rank runs under Ray Train: one worker per GPU (or CPU rank).

Rank 0 first runs the auxiliary-worker coordinator (seed §5.4) and shares the services'
handles with every rank. Each rank then draws its batches, asks the target service (over
ZeroMQ) for the teacher's outputs, and takes a DDP step. Before the first step the run
resumes from a checkpoint when there is one (after Ray Train restarted the worker group,
the newest one the run committed); after each step the hooks run: the FleetMonitor reporter
on rank 0, then the checkpoint manager. Rank 0 records progress, checkpoints and fleet
summaries in the run's progress actor, which the driver prints.

With fault tolerance on (runtime.ft), this worker group is one torchft replica group: the
driver runs the services for all groups, a step may be discarded (a group failed during it)
and the lowest group in the quorum speaks for the run; `Replica` hides the difference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass
from typing import Any

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist

from runtime.aux.client import AuxClient, ServiceHandle
from runtime.aux.coordinator import AuxCoordinator
from runtime.aux.refresh import WeightPublisher
from runtime.aux.services import EncoderService
from runtime.checkpoint.manager import CheckpointHook
from runtime.checkpoint.training import TrainState
from runtime.crash.capture import rank_failures
from runtime.data.aux_producer import remote_source
from runtime.diloco.learner import learner_for
from runtime.fleet import FleetReporter, FleetSink, monitor_name, report_interval
from runtime.ft.replica import Replica, ReplicaSpec, replica_for
from runtime.planner import CapacityPlan
from runtime.train.batches import BatchSource, build_batches
from runtime.train.checkpointing import CheckpointManager, ResumePoint, aux_hooks, restart_point
from runtime.train.config import TrainConfig
from runtime.train.model import build_model
from runtime.train.numa import pin_to_numa_node
from runtime.train.progress import ProgressRecorder
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


Services = dict[str, ServiceHandle]


class _Targets:
    """Teacher outputs: from the configured auxiliary service, or a local teacher. When the
    service takes weight refreshes (`refresh: true`), training owns the teacher's weights:
    the lead rank pushes them before the first step, and every request asks for a pushed
    version (>= 1), never the service's own initial weights."""

    def __init__(self, context: LoopContext, services: Services, rank: int) -> None:
        model = context.config.model
        name = model.target_service
        # Every rank reports to one FleetMonitor: in a large fleet each reports less often.
        interval = report_interval(context.config.aux.report_interval_s, _ranks(context))
        self.client = AuxClient(
            services[name], rank, _client_reporter(context.run_id), interval,
        ) if name else None
        self.local = EncoderService(model.input_dim, model.output_dim, seed=context.config.run.seed)
        point = services[name].refresh if name else None
        self.min_version = 0 if point is None else 1
        lead = rank == 0 and (context.replica is None or context.replica.index == 0)
        self.publisher = WeightPublisher(point) if point is not None and lead else None
        if self.publisher is not None:
            self.publisher.publish({"w1": self.local.w1, "w2": self.local.w2})

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.client is None:
            return self.local.handle("encode", {"x": x})["y"]
        return self.client.call("encode", {"x": x}, min_version=self.min_version)["y"]

    def close(self) -> None:
        """Close the client's sockets, reporting the transfer times it still holds."""
        if self.client is not None:
            self.client.close()
        if self.publisher is not None:
            self.publisher.close()


def _client_reporter(run_id: str) -> Callable[[Any], None]:
    monitor = ray.get_actor(monitor_name(run_id))
    return lambda sample: monitor.record_client.remote(sample)


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
    torch.manual_seed(config.run.seed)
    model = replica.model(build_model(config.model))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.model.lr)
    stepper = replica.optimizer(optimizer)  # torchft's wrapper: quorum, then commit vote
    who = _global_rank(context, rank)
    targets = _Targets(context, services, who)
    batches = _batches(config, services, replica, rank, who)
    state = TrainState(model, optimizer, batches)
    checkpoint = CheckpointManager(config.checkpoint, state,
                                   [*aux_hooks(coordinator), *context.hooks], context.run_id,
                                   replica.replica_group)
    telemetry = _telemetry(context, who, model)
    diloco = learner_for(config.diloco, model, rank)  # a no-op unless a DiLoCo learner
    with closing(batches), closing(targets), checkpoint, _closing(telemetry), closing(diloco):
        point = restart_point(config, context.run_id, context.resume)
        done = replica.resume(state, checkpoint.resume(point))
        diloco.join()  # the shared weights replace the resumed ones
        recorder = _recorder(context, rank, done)
        _note_restart(context, recorder, point)
        hooks = [diloco.after_step, *_step_hooks(context, services, checkpoint, recorder,
                                                 telemetry)]
        samples = _samples_per_rank(config)
        for attempt in replica.steps(done, config.run.steps):
            loss = _step(model, stepper, targets, batches, telemetry)
            step = replica.committed(attempt)
            if step is None:
                continue  # discarded: a replica group failed during it (torchft)
            if telemetry is not None:
                telemetry.step(step, loss, samples)
            _log_progress(context, recorder if replica.leads() else None, step, loss)
            for hook in hooks:
                hook(step)
        _final_report(context, services, recorder, telemetry)
    if recorder is not None:
        recorder.flush()


def _batches(
    config: TrainConfig, services: Services, replica: Replica, rank: int, who: int
) -> BatchSource:
    """This rank's batches. With `data.producer_service` its producers fetch through that
    auxiliary service as rank `who` (the config allows it without fault tolerance only, so
    the replica is NoReplica, whose batches are build_batches')."""
    name = config.data.producer_service if config.data is not None else None
    if name is None:
        return replica.batches(config, rank)
    return build_batches(config, rank, remote_source(services[name], who))


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


def _step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, targets: _Targets,
    batches: BatchSource, telemetry: RankTelemetry | None,
) -> torch.Tensor:
    """One DDP optimizer step; the loss, detached. The batch is drawn after zero_grad, where
    torchft forms the step's quorum, which places this rank in the sample stream."""
    optimizer.zero_grad()
    x = next(batches)
    loss = torch.nn.functional.mse_loss(model(x), targets(x))
    if telemetry is not None:
        telemetry.before_backward()
    loss.backward()
    optimizer.step()
    return loss.detach()


def _mean_across_ranks(value: torch.Tensor) -> float:
    total = value.clone()
    dist.all_reduce(total)
    return total.item() / dist.get_world_size()


def _samples_per_rank(config: TrainConfig) -> int:
    return config.data.batch_size if config.data is not None else config.model.batch_size


def _samples_per_step(config: TrainConfig) -> int:
    return _samples_per_rank(config) * dist.get_world_size()


def _recorder(context: LoopContext, rank: int, done: int) -> ProgressRecorder | None:
    """Rank 0's progress recorder, started after `done` steps (the resumed ones)."""
    if rank != 0:
        return None
    config = context.config
    return ProgressRecorder(context.run_id, config.run.steps, _samples_per_step(config), done)


def _note_restart(
    context: LoopContext, recorder: ProgressRecorder | None, point: ResumePoint | None
) -> None:
    """Say so when Ray Train restarted the worker group and it resumed from a newer
    checkpoint than the run started from."""
    if recorder is not None and point is not None and point != context.resume:
        recorder.notice(f"worker group restarted after a failure: resuming from {point.uri} "
                        f"(step {point.step}), the newest checkpoint this run committed")


def _log_progress(
    context: LoopContext, recorder: ProgressRecorder | None, step: int, loss: torch.Tensor
) -> None:
    run = context.config.run
    if step % run.log_every and step != run.steps:
        return
    mean = _mean_across_ranks(loss)  # every rank joins the collective
    if recorder is not None:
        log.debug("step %d/%d loss %.5f", step, run.steps, mean)  # the driver prints it
        recorder.step(step, mean)


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
