"""Samples per second of each rank with local producers against producers on one auxiliary
loader that serves all ranks (runtime.data.aux_producer), CPU-heavy transform, in one run.

`--ranks` rank processes read their slices of one global schedule at the same time, each
through its own pipeline: first each with `--producers` local producers, then each with as
many producers that fetch from one auxiliary loader (a proxy and `--aux-workers` workers, each
in a process of its own, as a cluster runs them). Besides samples/s per rank it reports the
CPU time the ranks' side spends per sample (the rank and its stage processes), which is what
moving the transform to auxiliary workers frees on a training node. On one machine the
workers share the ranks' cores, so the rates show what the remote path costs, not what it
frees.

    .venv/bin/python benchmarks/aux_loader.py [--ranks 2] [--producers 2] [--aux-workers 2]
                                               [--batches 40]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from runtime.aux.client import Endpoint, ServiceHandle
from runtime.aux.proxy import ProxyCore
from runtime.aux.worker import WorkerCore
from runtime.data.aux_producer import ProducerService, remote_source
from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline

DATA: dict[str, Any] = {
    "datasets": [{"name": "images", "_target_": "runtime.data.synthetic.SyntheticImages",
                  "length": 20000, "size": 64}],
    "transform": {"_target_": "runtime.data.synthetic.augment"},
    "batch_size": 32,
    "chunk_size": 16,
    "start_method": "fork",
}
WARMUP_BATCHES = 3  # start-up and the first fetches, apart from the timed batches


@dataclass(frozen=True)
class RankFigures:
    """What one rank measured."""

    rank: int
    samples_per_s: float
    cpu_ms_per_sample: float  # the rank and its stage processes, over the pipeline's life


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have exited."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _rank(rank: int, ranks: int, config: DataConfig, handle: ServiceHandle | None,
          batches: int, start: Any, results: Any) -> None:
    """One rank: its pipeline, timed once every rank is warm; a failure goes to `results`
    (and breaks the barrier, so that no other rank waits for this one)."""
    try:
        results.put(_measure(rank, ranks, config, handle, batches, start))
    except BaseException as error:
        start.abort()
        results.put(RuntimeError(f"rank {rank}: {type(error).__name__}: {error}"))
        raise


def _measure(rank: int, ranks: int, config: DataConfig, handle: ServiceHandle | None,
             batches: int, start: Any) -> RankFigures:
    source = remote_source(handle, rank) if handle is not None else None
    cpu = _cpu_s()
    with DataPipeline(config, rank=rank, world_size=ranks, source=source) as pipe:
        for _ in range(WARMUP_BATCHES):
            next(pipe)
        start.wait()
        started = time.perf_counter()
        for _ in range(batches):
            next(pipe)
        elapsed = time.perf_counter() - started
    samples = (WARMUP_BATCHES + batches) * config.batch_size
    cpu_ms = (_cpu_s() - cpu) * 1e3 / samples  # the stages have exited: their time counts
    return RankFigures(rank, batches * config.batch_size / elapsed, cpu_ms)


def _ranks(config: DataConfig, ranks: int, handle: ServiceHandle | None,
           batches: int) -> list[RankFigures]:
    """Every rank at once, each in a process of its own; their figures by rank."""
    forks = mp.get_context("fork")
    start, results = forks.Barrier(ranks), forks.Queue()
    procs = [forks.Process(target=_rank, args=(r, ranks, config, handle, batches, start,
                                               results)) for r in range(ranks)]
    for proc in procs:
        proc.start()
    figures = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    failed = [f for f in figures if isinstance(f, Exception)]
    if failed:
        raise failed[0]
    return sorted(figures, key=lambda f: f.rank)


def _proxy(folder: str, address: Any) -> None:
    core = ProxyCore("loader", "p", "127.0.0.1", f"ipc://{folder}/loader.sock")
    signal.signal(signal.SIGTERM, lambda *_: core.stop.set())
    address.put(core.address)
    core.run()


def _worker(folder: str, index: int) -> None:
    service = ProducerService(DATA)
    service.startup_check()
    core = WorkerCore("loader", f"w{index}", f"ipc://{folder}/loader.sock", service, 64)
    signal.signal(signal.SIGTERM, lambda *_: core.stop.set())
    core.run()


def _auxiliary(config: DataConfig, ranks: int, workers: int, batches: int) -> list[RankFigures]:
    """The ranks fed by one auxiliary loader of `workers` workers."""
    forks = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as folder:
        address = forks.Queue()
        processes = [forks.Process(target=_proxy, args=(folder, address), daemon=True)]
        processes += [forks.Process(target=_worker, args=(folder, i), daemon=True)
                      for i in range(workers)]
        for process in processes:
            process.start()
        handle = ServiceHandle("loader", (Endpoint(address.get(timeout=60), workers),), 120.0, 1)
        try:
            return _ranks(config, ranks, handle, batches)
        finally:
            for process in processes:
                process.terminate()
                process.join()


def _line(label: str, figures: list[RankFigures], base: list[RankFigures] | None) -> str:
    rates = ", ".join(f"{f.samples_per_s:5.0f}" for f in figures)
    cpu = statistics.mean(f.cpu_ms_per_sample for f in figures)
    line = f"  {label:<34} per rank {rates} samples/s; rank-side CPU {cpu:5.2f} ms/sample"
    if base is not None:
        mean = statistics.mean(f.samples_per_s for f in figures)
        ratio = mean / statistics.mean(f.samples_per_s for f in base)
        line += f" | samples/s ratio {ratio:.2f}"
    return line


def main() -> None:
    """Local producers, then the same ranks fed by one auxiliary loader."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2, help="ranks reading at once")
    parser.add_argument("--producers", type=int, default=2, help="producers per rank")
    parser.add_argument("--aux-workers", type=int, default=2, help="auxiliary loader workers")
    parser.add_argument("--batches", type=int, default=40, help="batches timed per rank")
    args = parser.parse_args()
    config = DataConfig(**{**DATA, "producers": args.producers})
    local = _ranks(config, args.ranks, None, args.batches)
    remote = _auxiliary(config, args.ranks, args.aux_workers, args.batches)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (other work shares them)")
    print(f"cpu-bound (64px images, crop/flip/4 convs), batch {config.batch_size}, "
          f"{args.ranks} ranks at once, {args.producers} producers per rank:")
    print(_line("local producers", local, None))
    print(_line(f"one auxiliary loader, {args.aux_workers} workers", remote, local))


if __name__ == "__main__":
    main()
