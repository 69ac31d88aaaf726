"""Collective test: all_reduce and all_gather with known answers over torch.distributed.

One process per GPU with NCCL, or `collective_world` processes with gloo on a CPU-only pod.
Bandwidth follows the nccl-tests conventions: algorithm bandwidth = bytes / time; bus bandwidth
= algbw * 2(n-1)/n for all_reduce and algbw * (n-1)/n for all_gather (of the gathered size).
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from runtime.preflight.allreduce import bus_bandwidth
from runtime.preflight.config import PreflightConfig
from runtime.preflight.result import Finding
from runtime.procs import die_with_parent

ITERATIONS = 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _timed(operation: Any) -> float:
    operation()  # warm-up: connection set-up is not bandwidth
    start = time.perf_counter()
    for _ in range(ITERATIONS):
        operation()
    return max((time.perf_counter() - start) / ITERATIONS, 1e-9)


def _all_reduce(world: int, device: torch.device, elements: int, rank: int) -> dict[str, Any]:
    buffer = torch.full((elements,), float(rank + 1), device=device)
    dist.all_reduce(buffer)
    exact = bool(torch.all(buffer == world * (world + 1) / 2))
    seconds = _timed(lambda: dist.all_reduce(buffer))
    return {"all_reduce_exact": exact,
            "all_reduce_busbw": bus_bandwidth(buffer.numel() * 4, seconds, world)}


def _all_gather(world: int, device: torch.device, elements: int, rank: int) -> dict[str, Any]:
    shard = torch.full((elements // world,), float(rank), device=device)
    gathered = [torch.empty_like(shard) for _ in range(world)]
    dist.all_gather(gathered, shard)
    exact = all(bool(torch.all(part == r)) for r, part in enumerate(gathered))
    seconds = _timed(lambda: dist.all_gather(gathered, shard))
    algbw = shard.numel() * world * 4 / seconds / 1e9
    return {"all_gather_exact": exact, "all_gather_busbw": algbw * (world - 1) / world}


def _rank(rank: int, world: int, port: int, backend: str, mib: float, out: Any) -> None:
    """One process of the test (spawned; module-level so that it pickles), which dies with
    the preflight (runtime.procs)."""
    die_with_parent()
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    try:
        elements = max(int(mib * 2**20 / 4) // world * world, world)
        report = _all_reduce(world, device, elements, rank)
        report |= _all_gather(world, device, elements, rank)
        out.put((rank, report))
    finally:
        dist.destroy_process_group()


def backend_for(config: PreflightConfig) -> str:
    return "nccl" if config.gpus and torch.cuda.is_available() else "gloo"


def run(config: PreflightConfig) -> dict[int, dict[str, Any]]:
    """Every rank's report; raises TimeoutError when the processes do not finish in time."""
    world, backend = config.world_size, backend_for(config)
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    processes = mp.start_processes(
        _rank, args=(world, _free_port(), backend, config.collective_mib, out), nprocs=world,
        join=False, start_method="spawn")
    deadline = time.monotonic() + config.collective_timeout_s
    while not processes.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in processes.processes:
                process.kill()
            raise TimeoutError(f"{world} ranks did not finish in {config.collective_timeout_s:g} s")
    reports = {}
    while not out.empty():
        rank, report = out.get()
        reports[rank] = report
    return reports


def check(config: PreflightConfig, figures: dict[str, float]) -> list[Finding]:
    backend, world = backend_for(config), config.world_size
    try:
        reports = run(config)
    except (TimeoutError, mp.ProcessRaisedException, mp.ProcessExitedException) as error:
        return [Finding(check="collective", severity="error",
                        message=f"{backend} over {world} ranks failed: {error}".splitlines()[0])]
    findings = []
    for name in ("all_reduce", "all_gather"):
        exact = len(reports) == world and all(r[f"{name}_exact"] for r in reports.values())
        busbw = min(r[f"{name}_busbw"] for r in reports.values())
        figures[f"collective.{name}.busbw_gbps"] = round(busbw, 3)
        findings.append(Finding(
            check="collective", severity="ok" if exact else "error",
            message=f"{name} {backend} x{world} {config.collective_mib:g} MiB: "
                    f"{'exact' if exact else 'WRONG RESULT'}, bus bandwidth {busbw:.2f} GB/s"))
    return findings
