"""The training driver (seed §5.1-§5.4, §7): check the run's components, plan capacity and
the device mesh, pick the checkpoint to resume from, start the FleetMonitor, run the
training workers through Ray Train (rank 0 starts the auxiliary services) while printing
their progress, report, clean up.

Ray Train restarts a failed worker group up to `run.max_failures` times; the group resumes
from the newest checkpoint the run committed (§7.1). With `fault_tolerance` on, the driver
hosts the torchft Lighthouse and the services, and runs one Ray Train worker group per
replica group, so that a failed group is replaced while the others train on (§7.2).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import ray
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

from runtime.components import Component
from runtime.crash.bundle import bundling
from runtime.crash.launch import Launch
from runtime.crash.where import localize_bundles
from runtime.errors import RuntimeFailure
from runtime.fleet import FleetReporter, ServiceSummary, report_interval, start_monitor
from runtime.ft.host import ReplicaHost
from runtime.planner import (
    CapacityPlan,
    NodeCapacity,
    PlanInput,
    ServiceDemand,
    WorkerRequest,
    plan_capacity,
)
from runtime.run.checkpointing import (
    ResumePoint,
    committed_steps,
    enabled,
    find_resume_point,
    localize,
)
from runtime.run.config import TrainConfig
from runtime.run.progress import printing, start_progress
from runtime.telemetry.ledger import ledger_folder
from runtime.telemetry.ledger_store import NoLedger, load_ledger, run_verdict
from runtime.telemetry.store import Store, default_dsn
from runtime.train.check import check_mesh, check_run
from runtime.train.loop import LoopContext, train_loop
from runtime.train.telemetry import Destination, RunTelemetry, destination
from runtime.warden.model import ShrinkRequest

Printer = Callable[[str], None]
# Says that a local Ray enabled token authentication by default: advice, not a problem.
TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"


@dataclass(frozen=True)
class TrainResult:
    """What a finished run reports back."""

    run_id: str
    plan: CapacityPlan
    losses: dict[int, float]
    fleet: dict[str, ServiceSummary]
    resumed: ResumePoint | None = None
    checkpoints: tuple[int, ...] = ()
    step_times: tuple[tuple[int, float], ...] = ()  # (logged step, when it finished)
    shrinks: tuple[ShrinkRequest, ...] = ()  # recorded shrink requests (torchft, no Warden)


@contextmanager
def ray_session(config: TrainConfig) -> Iterator[None]:
    """Join the configured cluster, or start a local Ray and stop it afterwards."""
    started = not ray.is_initialized()
    if started:
        _start_ray(config)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def _start_ray(config: TrainConfig) -> None:
    address = config.run.ray_address
    # "local": always a new local Ray, never one another process on the machine started.
    kwargs = {"address": address} if address else {"address": "local",
                                                   "num_cpus": config.run.local_cpus}
    forward = config.logging.forward_worker_logs
    if not forward:
        logging.getLogger(TOKEN_NOTICE_LOGGER).setLevel(logging.ERROR)
    # log_to_driver=False leaves Ray Train's and the workers' own output in Ray's session logs
    # (/tmp/ray/session_latest/logs); a rank's error still reaches the driver as the exception
    # `fit` raises, and Ray's system errors (a worker died) are printed either way.
    ray.init(
        include_dashboard=False, logging_level=logging.WARNING, log_to_driver=forward,
        runtime_env=None if address else {"env_vars": {"PYTHONPATH": importable_path()}},
        **kwargs,
    )


def importable_path() -> str:
    """The working directory importable here and in a local Ray's workers, as `python -m`
    makes it: a researcher's `model._target_: mylab.models.MyLM` beside their config. (A
    cluster job gets its working directory from `ray job submit --working-dir`.)"""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return os.pathsep.join(p for p in (cwd, os.environ.get("PYTHONPATH", "")) if p)


def cluster_nodes() -> tuple[NodeCapacity, ...]:
    """What each alive Ray node offers."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return tuple(
        NodeCapacity(n["Resources"].get("GPU", 0.0), n["Resources"].get("CPU", 0.0)) for n in nodes
    )


def plan_for(config: TrainConfig, nodes: tuple[NodeCapacity, ...]) -> CapacityPlan:
    """The planner's input from the configuration and the cluster."""
    services = tuple(
        ServiceDemand(name, WorkerRequest(s.gpus_per_worker, s.cpus_per_worker), s.ratio,
                      s.min_replicas, s.singleton)
        for name, s in config.aux.services.items()
    )
    layout, ft = config.layout, config.fault_tolerance
    training = WorkerRequest(layout.gpus_per_worker, layout.cpus_per_worker)
    # With torchft the world is replica groups x group size: a multiple of the group count.
    multiple = layout.multiple * (ft.replica_groups if ft.enabled else 1)
    return plan_capacity(PlanInput(nodes, training, services, multiple, layout.max_world_size))


def print_now(line: str) -> None:
    """Print a line at once, also when stdout is a pipe (a pod's log): progress is live."""
    print(line, flush=True)


def run_training(config: TrainConfig, echo: Printer = print_now,
                 launch: Launch | None = None) -> TrainResult:
    """Plan, resume or start fresh, start services, train to the last step, report, clean up;
    a failed run leaves a crash bundle (runtime.crash; `launch`: how the run was started)."""
    config = localize_bundles(localize(_absolute_paths(config)))
    importable_path()
    source = launch.config if launch is not None else "config"
    checked = check_run(config, source=source)  # a wrong component fails before Ray starts
    run_id = f"{config.run.name}-{uuid.uuid4().hex[:6]}"
    with ray_session(config):
        plan = plan_for(config, cluster_nodes())
        layout = [checked.model, check_mesh(config, plan.world_size, source).explain()]
        echo(f"capacity plan for run {run_id}:\n{plan.explain()}\n" + "\n".join(layout))
        resume = find_resume_point(config)
        _echo_start(config, resume, echo)
        if resume is not None and resume.step >= config.run.steps:
            return TrainResult(run_id, plan, {}, {}, resume, tuple(committed_steps(config)))
        every_s = report_interval(config.aux.report_interval_s, plan.world_size)
        monitor = start_monitor(run_id, stale_after_s=3 * every_s + 2)
        progress = start_progress(run_id)
        where = destination(config)
        # The ledger is kept with telemetry off too (its files); the store judges it when on.
        ledger = ledger_folder(where.dsn if where else default_dsn()) \
            if config.telemetry.ledger else None
        context = LoopContext(config, plan, run_id, resume, where, ledger=ledger)
        with printing(progress, echo), recording(where, run_id, echo), \
                bundling(config, run_id, echo, launch, where.dsn if where else None):
            shrinks = _fit(config, plan, context, echo)
        if where is not None and ledger is not None:
            echo(judge_ledger(where.dsn, ledger, run_id))
        losses, fleet = _outcome(config, monitor, progress)
        times = tuple(ray.get(progress.step_times.remote()))
    result = TrainResult(run_id, plan, losses, fleet, resume, tuple(committed_steps(config)),
                         times, tuple(shrinks))
    _echo_checkpoints(config, result, echo)
    return result


def _absolute_paths(config: TrainConfig) -> TrainConfig:
    """Local `path` arguments of the datasets and metric loggers made absolute, relative to
    this process: Ray Train workers and loader stages run in other directories."""
    update: dict[str, Any] = {"loggers": [_absolute(logger) for logger in config.loggers]}
    if config.data is not None:
        datasets = [_absolute(dataset) for dataset in config.data.datasets]
        update["data"] = config.data.model_copy(update={"datasets": datasets})
    return config.model_copy(update=update)


AnyComponent = TypeVar("AnyComponent", bound=Component)


def _absolute(section: AnyComponent) -> AnyComponent:
    path = section.kwargs.get("path")
    if not isinstance(path, str) or "://" in path or Path(path).is_absolute():
        return section
    raw = {**section.model_dump(by_alias=True), "path": str(Path(path).absolute())}
    return type(section).model_validate(raw)


@contextmanager
def recording(where: Destination | None, run_id: str, echo: Printer) -> Iterator[None]:
    """The run's telemetry store open while the body trains; its start and end as events."""
    if where is None:
        yield
        return
    telemetry = RunTelemetry(where, run_id)
    telemetry.event("Started", f"run {run_id} started")
    try:
        yield
    except BaseException as error:
        telemetry.event("Failed", str(error)[:4000], severity="Warning")
        raise
    else:
        telemetry.event("Succeeded", f"run {run_id} finished")
    finally:
        echo(telemetry.close())


def judge_ledger(dsn: str, folder: Path, run_id: str) -> str:
    """Load the ledger files this machine holds into the store (a local run: all of them;
    in pods Fluent Bit ships each node's) and say whether every sample was trained once."""
    with Store.connect(dsn) as store:
        load_ledger(store, folder, run_id)
        try:
            verdict = run_verdict(store, [run_id])
        except NoLedger:
            return (f"sample ledger: no rows for run {run_id} in the store yet; "
                    f"`gkr ledger {run_id}` judges it once they are loaded")
    return f"sample ledger: {verdict.headline()} (see `gkr ledger {run_id}`)"


def _outcome(
    config: TrainConfig, monitor: Any, progress: Any
) -> tuple[dict[int, float], dict[str, ServiceSummary]]:
    """The losses, and the fleet as of the last step: the services stop with the workers, so
    a summary taken now would count every worker as gone."""
    losses = ray.get(progress.history.remote())
    last_step_at = ray.get(progress.last_step_at.remote())
    return losses, FleetReporter(monitor, [], 0).report(config.run.steps, now=last_step_at)


def _echo_start(config: TrainConfig, resume: ResumePoint | None, echo: Printer) -> None:
    section = enabled(config)
    if section is None:
        return
    if resume is None:
        echo(f"checkpoints: {section.uri} (every {section.interval_steps} steps, "
             f"keeping {section.keep_last}); starting at step 0")
    elif resume.step >= config.run.steps:
        echo(f"checkpoint {resume.uri} is at step {resume.step}, which already reaches "
             f"run.steps={config.run.steps}: nothing to train (raise run.steps to go on, or "
             "set checkpoint.resume_from=null with another checkpoint.uri to start over)")
    else:
        echo(f"checkpoints: resuming from {resume.uri} (step {resume.step})")


def _echo_checkpoints(config: TrainConfig, result: TrainResult, echo: Printer) -> None:
    section = enabled(config)
    if section is not None:
        steps = ", ".join(str(step) for step in result.checkpoints) or "none"
        echo(f"checkpoints: {section.uri}: committed steps {steps}")


def _fit(
    config: TrainConfig, plan: CapacityPlan, context: LoopContext, echo: Printer
) -> list[ShrinkRequest]:
    """Train; the shrink requests a fault-tolerant run recorded."""
    if config.fault_tolerance.enabled:
        return _fit_replica_groups(config, plan, context, echo)
    try:
        _trainer(config, context, plan.world_size, context.run_id).fit()
    except Exception as error:  # Ray Train wraps every worker failure
        message = describe_failure(error)
        raise RuntimeFailure(f"training run {context.run_id} failed: {message}") from error
    return []


def _trainer(config: TrainConfig, context: LoopContext, workers: int, name: str) -> TorchTrainer:
    """One Ray Train worker group, restarted from the last checkpoint on a failure."""
    layout = config.layout
    use_gpu = layout.gpus_per_worker > 0
    backend = layout.backend or ("nccl" if use_gpu else "gloo")
    return TorchTrainer(
        train_loop,
        train_loop_config={"context": context},
        scaling_config=ScalingConfig(
            num_workers=workers, use_gpu=use_gpu,
            resources_per_worker={"CPU": layout.cpus_per_worker},
        ),
        torch_config=TorchConfig(backend=backend),
        run_config=RunConfig(
            name=name, failure_config=FailureConfig(max_failures=config.run.max_failures)
        ),
    )


def _fit_replica_groups(
    config: TrainConfig, plan: CapacityPlan, context: LoopContext, echo: Printer
) -> list[ShrinkRequest]:
    """One Ray Train worker group per replica group, side by side: a group's failure
    restarts only that group (runtime.ft.group says why)."""
    with ReplicaHost(config, context.run_id, plan, context.resume) as host:
        echo(host.explain())
        failures: dict[int, str] = {}

        def fit(group: LoopContext) -> None:
            assert group.replica is not None
            name = f"{context.run_id}-group-{group.replica.index}"
            try:
                _trainer(config, group, host.group_size, name).fit()
            except Exception as error:  # this group gave up; the others may go on
                failures[group.replica.index] = describe_failure(error)

        threads = [threading.Thread(target=fit, args=(group,), name=f"gkr-group-{i}")
                   for i, group in enumerate(host.contexts(context))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for line in host.finish(failures):
            echo(line)
        return host.shrinks()


def describe_failure(error: Exception) -> str:
    """A rank's own runtime error (it says what went wrong) rather than Ray's wrapping."""
    failures = getattr(error, "worker_failures", None) or {}
    for rank, failure in sorted(failures.items()):
        if isinstance(failure, RuntimeFailure):
            return f"rank {rank}: {failure}"
    return str(error)
