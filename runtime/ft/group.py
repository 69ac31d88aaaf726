"""A torchft replica group as the ranks of one Ray Train worker group see it (seed §7.2).

Why one Ray Train worker group per replica group: when one worker of a group dies, Ray Train
tears the whole worker group down and, within `run.max_failures`, starts it again. That is
what a replica group that lost a shard needs (it has lost part of its state), and it must
stay within the group: so the driver runs one TorchTrainer per replica group side by side
(runtime.ft.host), and killing one group restarts only that group. The restarted group is
the replacement; it heals from a live peer through torchft's checkpoint transport, not from
storage. The group's own liveness watchdog (runtime.ft.watchdog) takes it out of the quorum
at once when a shard dies, before Ray Train has noticed.

Inside a group the model is laid out on the group's own mesh (Ray Train's process group of
the group's ranks): whole float32 replicas are torchft's DDP, whose gradients the optimizer
averages over the group's ranks; anything sharded or in bfloat16 is FSDP2 / TP
(runtime.parallel), whose reduce-scatter averages within the group. Across groups torchft
does: rank 0 of the group runs the Manager server that heartbeats to the driver's
Lighthouse; the Manager all-reduces gradients over a gloo (NCCL on GPUs) process group of
the same group rank in every group, re-formed at every quorum (DDP's communication hook, or
FSDP2's all-reduce hook on each rank's reduced shard, as torchft's fsdp_test does); and
torchft's optimizer wrapper applies a step only when every rank of the group votes to commit
it, so a step is committed by the groups that finished it together or by none of them.
A healing group receives its peer's state shard by shard: the same layout on the same
group rank holds the same shards, placed on the receiver's own mesh (`_local_shards`).

Rank 0 of every group also watches the quorum: the lowest-index group's acts on a dropped
group (runtime.ft.shrink). Below `min_replica_groups` no quorum forms; after
`quorum_timeout_s` the group records why on the run's Board and ends, and the driver stops
the run with that message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any, cast

import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_flatten_with_path, tree_map_only, tree_map_with_path
from torchft.ddp import DistributedDataParallel
from torchft.manager import Manager
from torchft.optim import OptimizerWrapper
from torchft.process_group import ProcessGroupGloo, ProcessGroupNCCL

from runtime.data.loader import SourceFactory
from runtime.errors import RuntimeFailure
from runtime.ft.batches import QuorumBatches
from runtime.ft.config import FaultToleranceConfig
from runtime.ft.listen import pod_bound_managers
from runtime.ft.origin import Origin, resumed
from runtime.ft.shrink import Drop, ShrinkTarget, board_name, shrink_request, shrink_target
from runtime.ft.watchdog import Watchdog
from runtime.identity import Identity, listen_host
from runtime.parallel.apply import parallelize
from runtime.parallel.layout import materialize, on_meta, whole_replicas
from runtime.parallel.mesh import build_mesh, mesh_shape
from runtime.run.batches import BatchSource
from runtime.run.config import TrainConfig
from runtime.run.progress import Notice, progress_name

log = logging.getLogger(__name__)
SHRINK_WAIT_S = 60.0  # at the end, how long a shrink request in flight may still take


class QuorumLost(RuntimeFailure):
    """No quorum of the minimum number of replica groups formed in time: the run stops."""


class RunOver(Exception):
    """The run finished or stopped while this group was away: a late replacement must not
    train it again from its own (fresh) state."""


class Quorum:
    """Which replica groups the current quorum holds, as torchft configures the process group."""

    def __init__(self) -> None:
        self.id, self.members = -1, frozenset[int]()

    def note(self, quorum_id: int | None, ranks: list[int] | None, group_rank: int | None,
             group_size: int | None) -> None:
        """torchft numbers a member's ranks `group index x group size + group rank`."""
        if quorum_id is None or ranks is None or group_size is None:
            return
        self.id = quorum_id
        self.members = frozenset((r - (group_rank or 0)) // group_size for r in ranks)


def _quorum_group(base: type, quorum: Quorum, timeout: timedelta) -> Any:
    """torchft's reconfigurable process group of `base`, telling `quorum` each membership."""

    class Tracked(base):
        def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int,
                      quorum_id: int | None = None, group_rank: int | None = None,
                      group_world_size: int | None = None,
                      global_ranks: list[int] | None = None) -> None:
            quorum.note(quorum_id, global_ranks, group_rank, group_world_size)
            super().configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank,
                              group_world_size, global_ranks)

    return Tracked(timeout=timeout)


class GroupDDP(DistributedDataParallel):
    """torchft's DDP, whose communication hook finds the group's Manager when it runs (the
    Manager starts after the model is built) and survives a failed all-reduce.

    torchft 0.2.0's hook asserts on the managed future of a failed all-reduce (a peer group
    died mid-step: gloo reports "Connection reset by peer"), which kills the survivors too.
    Here the Manager records the failure, the gradients are left as they are, and the
    commit vote discards the step, as torchft intends (torchft/manager.py, `allreduce`)."""

    @staticmethod
    def _comm_hook(group, bucket):
        # Unannotated on purpose: DDP checks a hook's annotations against the classes
        # themselves, and postponed annotations are strings. `group`: the ReplicaGroup.
        grads = bucket.buffer()
        group.manager.allreduce(grads).wait()  # averaged in place; on failure it is recorded
        done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        done.set_result(grads)
        return done


class GroupOptimizer(OptimizerWrapper):
    """torchft's optimizer wrapper (quorum at zero_grad, commit vote at step), which first
    averages gradients over the group's own ranks and turns a failed quorum into QuorumLost."""

    def __init__(self, optimizer: torch.optim.Optimizer, on_quorum: Callable[[], None],
                 within_group: bool) -> None:
        """`within_group`: average gradients over the group's ranks at each step (DDP's
        whole replicas; FSDP2's reduce-scatter has done it)."""
        super().__init__(None, optimizer)  # the group gives it the Manager once it starts
        self.on_quorum, self.started_at, self.within_group = on_quorum, 0, within_group

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Form this step's quorum (healing from a peer when behind), then clear gradients."""
        try:
            super().zero_grad(set_to_none)
        except Exception as error:  # torchft raises what its quorum RPC raised
            raise QuorumLost(str(error).splitlines()[0] if str(error) else repr(error)) from error
        self.started_at = self.manager.current_step()
        self.on_quorum()

    def step(self, closure: object = None) -> None:
        """Average over the group, then apply the step if every rank of the group commits."""
        if self.within_group:
            _average_within_group(self.optim)
        super().step(closure)


def _average_within_group(optimizer: torch.optim.Optimizer) -> None:
    world = dist.get_world_size() if dist.is_initialized() else 1
    grads = [p.grad for group in optimizer.param_groups for p in group["params"]
             if p.grad is not None]
    if world == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


class Controller:
    """Rank 0 of a group: notices quorum changes; the lowest-index group asks for shrinks."""

    def __init__(self, index: int, run_id: str, config: FaultToleranceConfig,
                 target: ShrinkTarget) -> None:
        self.index, self.run_id, self.config, self.target = index, run_id, config, target
        self.board = ray.get_actor(board_name(run_id))
        self.progress = ray.get_actor(progress_name(run_id))
        self.seen, self.previous = -1, frozenset[int]()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="gkr-shrink")
        self.pending: list[Future[None]] = []

    def observe(self, quorum: Quorum, step: int) -> None:
        """After each quorum: act on the groups it lost since the last one this rank saw."""
        if quorum.id == self.seen:
            return
        self.seen, previous, self.previous = quorum.id, self.previous, quorum.members
        for group in dropped_groups(previous, quorum.members, self.index):
            drop = Drop(group, quorum.id, step)
            self.pending.append(self.pool.submit(self._shrink, drop, quorum.members))

    def _shrink(self, drop: Drop, left: frozenset[int]) -> None:
        """Ask once (training does not wait); say what happened either way."""
        pods = cast(dict[int, set[str]], ray.get(self.board.pods_by_group.remote()))
        request = shrink_request(self.run_id, drop, pods, self.config, Identity.from_env())
        self.notify(f"replica group {drop.group} dropped at step {drop.step}; training goes on "
                    f"with groups {_names(left)}; asking Warden to shrink "
                    f"{request.cluster} by {request.remove} pod(s)")
        try:
            outcome = self.target.request(request)
        except Exception as error:  # Warden unreachable: training goes on regardless
            self.notify(f"shrink request {request.request_id} failed: {error}")
            return
        log.info("shrink request %s: %s", request.request_id, outcome)

    def notify(self, text: str) -> None:
        """A line in the driver's output."""
        self.progress.record.remote(Notice(text))

    def close(self) -> None:
        """Let a request in flight finish (it is quick), then stop."""
        for future in self.pending:
            future.result(timeout=SHRINK_WAIT_S)
        self.pool.shutdown(wait=False)


def dropped_groups(previous: frozenset[int], current: frozenset[int], me: int) -> list[int]:
    """The groups to shrink away after a quorum change, as group `me` sees it: those the
    quorum lost, when `me` is the lowest-index group left (the controller); else none. A
    rank's first quorum (`previous` empty) has lost nothing."""
    if not current or me != min(current):
        return []
    return sorted(previous - current)


def _names(groups: frozenset[int]) -> str:
    return ", ".join(str(g) for g in sorted(groups)) or "none"


class ReplicaGroup:
    """One rank of a torchft replica group (a Replica for the training loop)."""

    def __init__(self, config: TrainConfig, run_id: str, index: int, lighthouse: str) -> None:
        """Group `index` of run `run_id`; `lighthouse`: the driver's, http://host:port."""
        train = ray.train.get_context()
        self.config, self.ft, self.run_id = config, config.fault_tolerance, run_id
        self.index, self.rank = index, train.get_world_rank()
        self.size = train.get_world_size()
        self.quorum, self.healed, self.seen = Quorum(), False, -1
        self.start = Origin("fresh", 0)
        self.board = ray.get_actor(board_name(run_id))
        self.board.register.remote(self.index, self.rank, Identity.from_env().pod)
        store, address = _group_store(self.rank)
        self.store: Any = store  # rank 0 serves it; kept alive as long as the group
        self.address: tuple[str, int] = address
        self.watchdog: Watchdog = Watchdog(address, self.index, self.rank, self.size,
                                           self.ft.watchdog_timeout_s)
        self.lighthouse: str = lighthouse
        self.controller: Controller | None = self._controller() if self.rank == 0 else None
        self.stepper: GroupOptimizer | None = None
        self.whole: bool = True  # whole float32 replicas (DDP); `model` says
        self.loader: QuorumBatches | None = None
        # Started by `resume`, right before the first quorum: once its Manager heartbeats,
        # the other groups wait for this one to join, so loading state comes first.
        self.started: Manager | None = None

    @property
    def manager(self) -> Manager:
        """The group's torchft Manager (running from `resume` on)."""
        if self.started is None:
            raise RuntimeFailure(f"replica group {self.index}: torchft is not started yet")
        return self.started

    def _manager(self) -> Manager:
        store, timeout = self.address, timedelta(seconds=self.ft.timeout_s)
        gpu = torch.cuda.is_available() and self.config.layout.gpus_per_worker > 0
        pg = _quorum_group(ProcessGroupNCCL if gpu else ProcessGroupGloo, self.quorum, timeout)
        # Bound to and advertised at the pod's IP, never every interface (runtime.ft.listen).
        pod_bound_managers()
        host = listen_host()
        return Manager(
            pg=pg, load_state_dict=None, state_dict=None,
            min_replica_size=self.ft.min_replica_groups, use_async_quorum=False,
            timeout=timeout, quorum_timeout=timedelta(seconds=self.ft.quorum_timeout_s),
            connect_timeout=timeout, rank=self.rank, world_size=self.size,
            store_addr=store[0], store_port=store[1], lighthouse_addr=self.lighthouse,
            # torchft numbers groups by the trailing digits of the replica id.
            replica_id=f"{self.run_id}-group-{self.index}", hostname=host,
            # Every group starts from the same seed or checkpoint: no step-0 weight sync.
            init_sync=False,
        )

    def _controller(self) -> Controller:
        return Controller(self.index, self.run_id, self.ft, shrink_target(self.ft, self.board))

    def model(self, module: nn.Module) -> nn.Module:
        """Laid out on the group's mesh, gradients averaged across the groups of the quorum:
        torchft's DDP for whole float32 replicas, else FSDP2 / TP with the Manager's
        all-reduce as each sharded unit's all-reduce hook."""
        device = ray.train.torch.get_device()
        layout = self.config.layout
        shape = mesh_shape(layout, self.size)  # the groups are the outer replicate dim
        self.whole = whole_replicas(shape, layout)
        if self.whole:
            return GroupDDP(self, materialize(module, device).to(device))
        if not on_meta(module):
            module = module.to(device)
        model = materialize(parallelize(module, build_mesh(shape, device.type), layout), device)
        for unit in model.modules():
            if isinstance(unit, FSDPModule):
                unit.set_all_reduce_hook(self._across_groups)
        return model

    def _across_groups(self, shard: torch.Tensor) -> None:
        """FSDP2's hook, after the group's reduce-scatter (torch's FSDPModule.
        set_all_reduce_hook): average this rank's reduced shard in place with the same shard
        of the other groups. A failure is recorded by the Manager (the step is discarded)."""
        self.manager.allreduce(shard).wait()

    def optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The group optimizer (torchft's wrapper): the loop steps it."""
        self.stepper = GroupOptimizer(optimizer, self._after_quorum, within_group=self.whole)
        return self.stepper

    def batches(self, config: TrainConfig, rank: int,
                source: SourceFactory | None = None) -> BatchSource:
        """This rank's slot of the global stream, as the quorum places it; `source`: an
        auxiliary producer service's (runtime.data.aux_producer.remote_source)."""
        assert config.data is not None  # the config validator requires it with fault tolerance
        self.loader = QuorumBatches(config.data, self._layout, source)
        return self.loader

    def _layout(self) -> tuple[int, int]:
        replica = self.manager.participating_rank()
        if replica is None:
            raise RuntimeFailure(f"replica group {self.index} is not in the quorum")
        # The ranks of one tensor-parallel group (innermost in the mesh) read the same batch.
        tp = self.config.layout.tp
        slots = self.size // tp
        return replica * slots + self.rank // tp, self.manager.num_participants() * slots

    def resume(self, state: Any, done: int) -> int:
        """Start torchft at the resumed step, and let it heal the group from a peer: torchft
        sends `state` to a group behind, and loads a peer's into it."""
        manager = self.started = self._manager()
        manager.load_state_dict({"step": done, "batches_committed": 0})
        self.start = resumed(done)
        manager.register_state_dict_fn("train", self._healing(state),
                                       lambda: _local_shards(state.state_dict()))
        if self.stepper is not None:
            self.stepper.manager = manager
        return done

    def _healing(self, state: Any) -> Callable[[Any], None]:
        def load(received: Any) -> None:
            state.load_state_dict(_placed(received, state.state_dict()))
            self.healed = True

        return load

    def _after_quorum(self) -> None:
        if self.quorum.id != self.seen:  # a new quorum: maybe the others finished and left
            self.seen = self.quorum.id
            if ray.get(self.board.over.remote()):
                raise RunOver
        step = self.manager.current_step()
        if self.healed:  # its weights are the peer's from here on: a new lineage
            self.start = Origin("heal", step)
        if self.healed and self.controller is not None:
            self.controller.notify(f"replica group {self.index} healed from a live peer at "
                                   f"step {step}")
        self.healed = False
        if self.controller is not None:
            self.controller.observe(self.quorum, step)

    def steps(self, done: int, total: int) -> Iterator[int]:
        """Attempts until torchft has committed `total` steps (a heal may skip ahead)."""
        while self.manager.current_step() < total:
            yield self.manager.current_step() + 1
        ray.get(self.board.finish.remote())

    def committed(self, attempt: int) -> int | None:
        """The step the attempt committed (torchft counts it), or None: then its samples go
        back to the stream."""
        assert self.stepper is not None and self.loader is not None
        step = self.manager.current_step()
        if step == self.stepper.started_at:
            self.loader.discard()
            return None
        self.loader.commit()
        return int(step)

    def origin(self) -> Origin:
        """"heal" and its step once the group healed from a live peer (again after training
        alone: under load a restarted group can form a quorum of its own and commit a few
        steps before the live groups come back and it heals from them); else the checkpoint
        it resumed from, or fresh."""
        return self.start

    def leads(self) -> bool:
        """Rank 0 of the lowest-index group in the quorum speaks for the run."""
        return self.rank == 0 and self.replica_group() == 0

    def replica_group(self) -> int:
        """0 while this group is the lowest in the quorum (it saves checkpoints), else 1."""
        in_quorum = self.started is not None and self.started.participating_rank() == 0
        return 0 if in_quorum else 1

    def __enter__(self) -> ReplicaGroup:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: object) -> bool:
        """Shut torchft down; a lost quorum ends this group cleanly, with its reason kept
        for the driver (the other groups' restarts must not bring the run back)."""
        try:
            if self.controller is not None:
                self.controller.close()
        finally:
            if self.started is not None:
                self.started.shutdown(wait=False)
            self.watchdog.close()
        if isinstance(error, RunOver):
            return True
        if not isinstance(error, QuorumLost):
            return False
        reason = (f"replica group {self.index}: no quorum of fault_tolerance."
                  f"min_replica_groups={self.ft.min_replica_groups} groups within "
                  f"{self.ft.quorum_timeout_s:g}s after step {self.manager.current_step()} "
                  f"(the last quorum had groups {_names(self.quorum.members)}): {error}")
        ray.get(self.board.stop.remote(reason))
        return True


def _local_shards(state: Any) -> Any:
    """`state` with each DTensor as its local shard: a DTensor pickles its mesh, whose process
    groups exist only in the sending process, so the receiver places the shards (`_placed`)."""
    return tree_map_only(DTensor, lambda tensor: tensor.to_local(), state)


def _placed(received: Any, own: Any) -> Any:
    """A peer's `_local_shards` as DTensors laid out like this rank's `own` state (DCP's
    get_state_dict fills a fresh optimizer's state, so every entry has its placement)."""
    like = {path: t for path, t in tree_flatten_with_path(own)[0] if isinstance(t, DTensor)}

    def place(path: Any, value: Any) -> Any:
        mine = like.get(path)
        if mine is None or not isinstance(value, torch.Tensor):
            return value
        return DTensor.from_local(value.to(mine.device), mine.device_mesh, mine.placements,
                                  run_check=False, shape=mine.shape, stride=mine.stride())

    return tree_map_with_path(place, received)


def _group_store(rank: int) -> tuple[Any, tuple[str, int]]:
    """The group's TCPStore (torchft's Manager finds its server through it), served by rank
    0 on a free port and shared with the group's ranks."""
    store = None
    shared: list[tuple[str, int] | None] = [None]
    if rank == 0:
        store = dist.TCPStore(ray.util.get_node_ip_address(), 0, is_master=True,
                              wait_for_workers=False)
        shared[0] = (ray.util.get_node_ip_address(), store.port)
    if dist.is_initialized():
        dist.broadcast_object_list(shared, src=0)
    assert shared[0] is not None
    return store, shared[0]
