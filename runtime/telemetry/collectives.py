"""The runtime timing its own collectives, in the shape of NCCL Inspector's records.

On GPUs NCCL Inspector measures every collective inside NCCL; on CPU (gloo) nothing does, so a
DDP communication hook times each gradient all-reduce from the moment this rank issues it to
its completion. A rank that arrives early waits inside the collective for the last one, so, as
with the inspector's kernel timing, the late rank has the shortest time (reference/telemetry.md
§6). Rows go to the `collectives` table with `source='gloo_timer'`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from runtime.telemetry.writer import TelemetryWriter

CommHook = Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]
SOURCE = "gloo_timer"
TIMING_SOURCE = "collective_cpu"  # the inspector's name for a CPU-timed collective


def bus_factor(coll: str, n_ranks: int) -> float:
    """busbw = algobw * this (NCCL's performance notes, as the inspector computes it)."""
    if n_ranks <= 1:
        return 1.0
    if coll == "AllReduce":
        return 2 * (n_ranks - 1) / n_ranks
    if coll in ("ReduceScatter", "AllGather"):
        return (n_ranks - 1) / n_ranks
    return 1.0


class CollectiveTimer:
    """Times collectives of one communicator on this rank and writes one row per collective."""

    def __init__(self, writer: TelemetryWriter, comm_id: str, comm_name: str, n_ranks: int,
                 nnodes: int) -> None:
        self.writer, self.comm_id, self.comm_name = writer, comm_id, comm_name
        self.n_ranks, self.nnodes = n_ranks, nnodes
        self.sequence = 0  # the per-communicator sequence number, as NCCL's coll_sn
        self.hostname, self.pid = socket.gethostname(), os.getpid()

    def record(self, coll: str, msg_size_bytes: int, seconds: float) -> None:
        """One finished collective on this rank."""
        self.sequence += 1
        exec_us = seconds * 1e6
        algobw = msg_size_bytes / max(seconds, 1e-9) / 1e9
        self.writer.write("collectives", {
            "source": SOURCE, "comm_id": self.comm_id, "comm_name": self.comm_name,
            "n_ranks": self.n_ranks, "nnodes": self.nnodes, "coll": coll,
            "coll_sn": self.sequence, "msg_size_bytes": msg_size_bytes, "exec_time_us": exec_us,
            "timing_source": TIMING_SOURCE, "algo": "", "algobw_gbs": algobw,
            "busbw_gbs": algobw * bus_factor(coll, self.n_ranks), "hostname": self.hostname,
            "pid": self.pid,
        })

    def allreduce_hook(self) -> CommHook:
        """A DDP communication hook: the default averaging all-reduce, timed."""

        def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
            tensor = bucket.buffer().div_(dist.get_world_size())
            size = tensor.numel() * tensor.element_size()
            started = time.perf_counter()
            future = dist.all_reduce(tensor, async_op=True).get_future()

            def done(finished: torch.futures.Future[Any]) -> torch.Tensor:
                self.record("AllReduce", size, time.perf_counter() - started)
                return finished.value()[0]

            return future.then(done)

        # DDP checks the hook's annotations as objects; this module's are strings (PEP 563).
        hook.__annotations__ = {"state": Any, "bucket": dist.GradBucket,
                                "return": torch.futures.Future[torch.Tensor]}
        return hook


def time_gradients(model: torch.nn.Module, timer: CollectiveTimer) -> bool:
    """Register the timed hook on a DDP model; False when the model is not DDP (one rank)."""
    register = getattr(model, "register_comm_hook", None)
    if register is None:
        return False
    register(None, timer.allreduce_hook())
    return True

