"""The loop every training rank runs under Ray Train: one worker per GPU (or CPU rank).

Rank 0 first runs the auxiliary-worker coordinator (seed §5.4) and shares the services'
handles with every rank. Each rank then draws its batches, asks the target service (over
ZeroMQ) for the teacher's outputs, and takes a DDP step. Before the first step the run
resumes from a checkpoint when there is one; after each step the hooks run: the
FleetMonitor reporter on rank 0, then the checkpoint manager. Rank 0 records progress,
checkpoints and fleet summaries in the run's progress actor, which the driver prints.
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
from runtime.aux.services import EncoderService
from runtime.checkpoint.training import TrainState
from runtime.fleet import FleetReporter, FleetSink, monitor_name
from runtime.planner import CapacityPlan
from runtime.train.batches import build_batches
from runtime.train.checkpointing import CheckpointManager, ResumePoint, aux_hooks
from runtime.train.config import TrainConfig
from runtime.train.model import build_model
from runtime.train.numa import pin_to_numa_node
from runtime.train.progress import ProgressRecorder
from runtime.train.telemetry import Destination, RankTelemetry

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


Services = dict[str, ServiceHandle]


class _Targets:
    """Teacher outputs: from the configured auxiliary service, or a local teacher."""

    def __init__(self, context: LoopContext, services: Services, rank: int) -> None:
        model = context.config.model
        name = model.target_service
        self.client = AuxClient(
            services[name], rank, _client_reporter(context.run_id),
            context.config.aux.report_interval_s,
        ) if name else None
        self.local = EncoderService(model.input_dim, model.output_dim, seed=context.config.run.seed)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.client is None:
            return self.local.handle("encode", {"x": x})["y"]
        return self.client.call("encode", {"x": x})["y"]

    def close(self) -> None:
        """Close the client's sockets, reporting the transfer times it still holds."""
        if self.client is not None:
            self.client.close()


def _client_reporter(run_id: str) -> Callable[[Any], None]:
    monitor = ray.get_actor(monitor_name(run_id))
    return lambda sample: monitor.record_client.remote(sample)


def train_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train entry point of every rank."""
    context: LoopContext = loop_config["context"]
    config = context.config
    logging.getLogger("runtime").setLevel(config.logging.level)
    train_context = ray.train.get_context()
    rank = train_context.get_world_rank()
    if config.layout.numa_affinity:
        pinned = pin_to_numa_node(train_context.get_local_rank())
        log.info("rank %d NUMA affinity: %s", rank, pinned or "single node, unchanged")
    coordinator, services = _start_services(context, rank)
    try:
        _train(context, services, rank, coordinator)
    finally:
        if coordinator is not None:
            coordinator.shutdown()


def _start_services(context: LoopContext, rank: int) -> tuple[AuxCoordinator | None, Services]:
    """Rank 0 places and starts the auxiliary services; every rank receives their handles."""
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
    context: LoopContext, services: Services, rank: int, coordinator: AuxCoordinator | None
) -> None:
    config = context.config
    torch.manual_seed(config.run.seed)
    model = ray.train.torch.prepare_model(build_model(config.model))
    optimizer = torch.optim.Adam(model.parameters(), lr=config.model.lr)
    targets, batches = _Targets(context, services, rank), build_batches(config, rank)
    state = TrainState(model, optimizer, batches)
    checkpoint = CheckpointManager(config.checkpoint, state, aux_hooks(coordinator))
    telemetry = _telemetry(context, rank, model)
    with closing(batches), closing(targets), checkpoint, _closing(telemetry):
        done = checkpoint.resume(context.resume)
        recorder = _recorder(context, rank, done)
        hooks = _step_hooks(context, services, checkpoint, recorder, telemetry)
        samples = _samples_per_rank(config)
        for step in range(done + 1, config.run.steps + 1):
            loss = _step(state, targets, next(batches), telemetry)
            if telemetry is not None:
                telemetry.step(step, loss, samples)
            _log_progress(context, recorder, step, loss)
            for hook in hooks:
                hook(step)
        _final_report(context, services, recorder, telemetry)
    if recorder is not None:
        recorder.flush()


def _telemetry(context: LoopContext, rank: int, model: torch.nn.Module) -> RankTelemetry | None:
    """This rank's telemetry, timing the model's gradient all-reduces; None when off."""
    if context.telemetry is None:
        return None
    train = ray.train.get_context()
    world, local = train.get_world_size(), train.get_local_world_size()
    telemetry = RankTelemetry(context.config, context.telemetry, context.run_id, rank, world,
                              nnodes=max(world // max(local, 1), 1))
    telemetry.watch(model)
    return telemetry


def _closing(telemetry: RankTelemetry | None) -> AbstractContextManager[Any]:
    return closing(telemetry) if telemetry is not None else nullcontext()


def _step(
    state: TrainState, targets: _Targets, x: torch.Tensor, telemetry: RankTelemetry | None
) -> torch.Tensor:
    """One DDP optimizer step; the loss, detached."""
    loss = torch.nn.functional.mse_loss(state.model(x), targets(x))
    state.optimizer.zero_grad()
    if telemetry is not None:
        telemetry.before_backward()
    loss.backward()
    state.optimizer.step()
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
