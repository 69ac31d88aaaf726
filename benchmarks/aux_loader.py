"""Samples per second of one rank's pipeline with local producers against producers on
auxiliary workers (runtime.data.aux_producer), CPU-heavy transform, in one run.

The auxiliary side is what a cluster runs: a proxy and `--aux-workers` loader workers, each
in a process of its own. Its point is to move the transform's CPU work off the training
node; on one machine the workers share the same cores as the rank, so this measures what the
remote path costs, not what it frees.

    .venv/bin/python benchmarks/aux_loader.py [--producers 2] [--aux-workers 2] [--batches 60]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import tempfile
import time
from typing import Any

from runtime.aux.client import Endpoint, ServiceHandle
from runtime.aux.proxy import ProxyCore
from runtime.aux.worker import WorkerCore
from runtime.data.aux_producer import ProducerService, remote_source
from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline

DATA: dict[str, Any] = {
    "datasets": [{"name": "images", "factory": "runtime.data.synthetic:SyntheticImages",
                  "kwargs": {"length": 20000, "size": 64}}],
    "transform": "runtime.data.synthetic:augment",
    "batch_size": 32,
    "chunk_size": 16,
    "start_method": "fork",
}


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


def _rate(pipe: DataPipeline, batches: int, batch: int) -> float:
    for _ in range(3):  # start-up and first fetches apart
        next(pipe)
    started = time.perf_counter()
    for _ in range(batches):
        next(pipe)
    return batches * batch / (time.perf_counter() - started)


def main() -> None:
    """Local producers, then the same pipeline fed by auxiliary loader workers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=2, help="the rank's producers")
    parser.add_argument("--aux-workers", type=int, default=2, help="auxiliary loader workers")
    parser.add_argument("--batches", type=int, default=60, help="batches timed per loader")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (other work shares them)")
    config = DataConfig(**{**DATA, "producers": args.producers})
    with DataPipeline(config) as local:
        local_rate = _rate(local, args.batches, config.batch_size)
    forks = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as folder:
        address = forks.Queue()
        processes = [forks.Process(target=_proxy, args=(folder, address), daemon=True)]
        processes += [forks.Process(target=_worker, args=(folder, i), daemon=True)
                      for i in range(args.aux_workers)]
        for process in processes:
            process.start()
        handle = ServiceHandle("loader", (Endpoint(address.get(timeout=60), 1),), 120.0, 1)
        with DataPipeline(config, source=remote_source(handle, 0)) as remote:
            remote_rate = _rate(remote, args.batches, config.batch_size)
        for process in processes:
            process.terminate()
            process.join()
    print(f"cpu-bound (64px images, crop/flip/4 convs), batch {config.batch_size}:")
    print(f"  local producers ({args.producers})          {local_rate:8.0f} samples/s")
    print(f"  auxiliary producers ({args.aux_workers} workers) {remote_rate:8.0f} samples/s"
          f" | ratio {remote_rate / local_rate:.2f}")


if __name__ == "__main__":
    main()
