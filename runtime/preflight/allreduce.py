"""The all-reduce between a job's pods: every pod's ranks (one per GPU with NCCL, one per
CPU-only pod with gloo) join one process group over the pod network, so the collective runs
over the interfaces and NCCL variables the job itself will use.

Bandwidth follows NVIDIA nccl-tests (doc/PERFORMANCE.md,
https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): algorithm bandwidth
algbw = S / t for a buffer of S bytes, and for all_reduce the bus bandwidth
busbw = algbw * 2(n-1)/n over n ranks, which is comparable across rank counts and to the
hardware's link speed. Every rank takes the slowest rank's time (a MAX all-reduce), so all
ranks agree on the figure and on whether to look further.

A collective runs at the pace of its slowest link, so the all-reduce over every pod cannot
say which pod is slow. When it is below the threshold and there are three pods or more, each
pod is also paired with the next one round the ring; a pod whose both pairs are slow is the
one to blame. Two pods make one pair: a slow link between them is nobody's in particular.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from runtime.identity import Env
from runtime.preflight.tasks import Backend, RankReport, Rendezvous
from runtime.procs import die_with_parent


class LocalFault(Exception):
    """This pod's own failure (its device, an injected fault): its node is to blame, not the
    peers that then lost it."""


def bus_bandwidth(nbytes: int, seconds: float, world: int) -> float:
    """nccl-tests' all_reduce busbw in GB/s: algbw * 2(n-1)/n (see the module docstring)."""
    return nbytes / seconds / 1e9 * 2 * (world - 1) / world


def ring_pairs(pods: int) -> list[tuple[int, int]]:
    """Each pod with the next round the ring, when that can single one out (three or more)."""
    return [(i, (i + 1) % pods) for i in range(pods)] if pods >= 3 else []


def _slow_seconds() -> float:
    fault = os.environ.get(Env.PREFLIGHT_FAULT, "")
    return float(fault.removeprefix("slow:")) if fault.startswith("slow:") else 0.0


def _device(backend: Backend, local: int) -> torch.device:
    if backend != "nccl":
        return torch.device("cpu")
    try:
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    except (RuntimeError, AssertionError) as error:  # no such GPU, or no driver
        raise LocalFault(f"GPU {local}: {error}") from error
    return device


def _timed(operation: Callable[[], Any], rdv: Rendezvous, device: torch.device,
           group: Any = None) -> float:
    """Seconds per operation after a warm-up (connection set-up is not bandwidth), as the
    slowest rank of `group` saw them."""
    operation()
    slow = _slow_seconds()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(rdv.iterations):
        time.sleep(slow)
        operation()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = torch.tensor([max((time.perf_counter() - start) / rdv.iterations, 1e-9)],
                           device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
    return float(seconds.item())


def _pairs(rdv: Rendezvous, pod: int, buffer: torch.Tensor) -> dict[str, float]:
    """Bus bandwidth of each ring pair this pod is in. Every rank makes every group, in the
    same order, before any is used: torch.distributed's rule for new_group."""
    k = rdv.ranks_per_pod
    groups = {(a, b): dist.new_group(sorted([*range(a * k, a * k + k), *range(b * k, b * k + k)]))
              for a, b in ring_pairs(rdv.pods)}
    found = {}
    for (a, b), group in groups.items():
        if pod in (a, b):
            seconds = _timed(partial(dist.all_reduce, buffer, group=group), rdv,
                             buffer.device, group)
            found[f"{a}-{b}"] = bus_bandwidth(buffer.numel() * 4, seconds, 2 * k)
    return found


def run_rank(pod: int, local: int, rdv: Rendezvous) -> RankReport:
    """One rank: join the group, all-reduce a known sum, time it, and the pairs if slow."""
    rank, world = pod * rdv.ranks_per_pod + local, rdv.world
    device = _device(rdv.backend, local)
    dist.init_process_group(rdv.backend, init_method=f"tcp://{rdv.master}:{rdv.port}",
                            rank=rank, world_size=world,
                            timeout=timedelta(seconds=rdv.timeout_s))
    try:
        if os.environ.get(Env.PREFLIGHT_FAULT) == "fail":
            raise LocalFault("injected fault (GKR_PREFLIGHT_FAULT=fail)")
        elements = max(int(rdv.mib * 2**20 / 4), 1)
        buffer = torch.full((elements,), float(rank + 1), device=device)
        dist.all_reduce(buffer)
        exact = bool(torch.all(buffer == world * (world + 1) / 2))
        if world == 1:
            return RankReport(exact=exact, busbw_gbps=None)
        seconds = _timed(lambda: dist.all_reduce(buffer), rdv, device)
        busbw = bus_bandwidth(buffer.numel() * 4, seconds, world)
        slow = rdv.min_busbw_gbps is not None and busbw < rdv.min_busbw_gbps
        return RankReport(exact=exact, busbw_gbps=busbw,
                          pairs=_pairs(rdv, pod, buffer) if slow else {})
    finally:
        dist.destroy_process_group()


def merge(reports: list[RankReport]) -> RankReport:
    """One pod's report from its ranks': exact only if all were, the lowest figures."""
    figures = [r.busbw_gbps for r in reports if r.busbw_gbps is not None]
    pairs: dict[str, float] = {}
    for report in reports:
        for key, value in report.pairs.items():
            pairs[key] = min(value, pairs.get(key, value))
    return RankReport(exact=all(r.exact for r in reports),
                      busbw_gbps=min(figures) if figures else None, pairs=pairs)


def _spawned(local: int, pod: int, rdv: Rendezvous, out: Any) -> None:
    """One rank in a process of its own (spawned; module-level so that it pickles), which
    dies with the pod's agent (runtime.procs). It reports instead of raising, so that the
    agent can tell its pod's own fault from a lost peer."""
    die_with_parent()
    try:
        out.put((local, "ok", run_rank(pod, local, rdv).model_dump()))
    except LocalFault as error:
        out.put((local, "local", str(error)))
    except Exception as error:  # a peer lost, a timeout: not this pod's fault alone
        out.put((local, "peer", f"{type(error).__name__}: {error}".splitlines()[0]))


def pod_ranks(pod: int, rdv: Rendezvous) -> RankReport:
    """Every rank of this pod; LocalFault when one failed on its own, RuntimeError when they
    lost their peers. One rank runs in this process; several, one process per GPU."""
    if rdv.ranks_per_pod == 1:
        return run_rank(pod, 0, rdv)
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    processes = mp.start_processes(_spawned, args=(pod, rdv, out), nprocs=rdv.ranks_per_pod,
                                   join=False, start_method="spawn")
    try:
        while not processes.join(timeout=1.0):
            pass  # each rank is bounded by rdv.timeout_s per collective
    except mp.ProcessExitedException as error:  # a rank crashed (a signal, a driver fault)
        raise LocalFault(str(error).splitlines()[0]) from error
    answers = [out.get() for _ in range(rdv.ranks_per_pod) if not out.empty()]
    for kind in ("local", "peer"):
        failed = [text for _, status, text in answers if status == kind]
        if failed:
            raise (LocalFault if kind == "local" else RuntimeError)(failed[0])
    if len(answers) < rdv.ranks_per_pod:
        raise LocalFault(f"{rdv.ranks_per_pod - len(answers)} rank processes died")
    return merge([RankReport.model_validate(body) for _, _, body in answers])
