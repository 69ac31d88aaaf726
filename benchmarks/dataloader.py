"""Samples per second of the GKR pipeline against torch.utils.data.DataLoader, same worker
count and transform, in a CPU-bound and an I/O-bound case, plus exact-resume latency.

DataLoader's way to resume exactly at batch k is to iterate and drop k batches; the GKR
pipeline starts at the checkpointed schedule offset without reading them.

With --startup it instead times the first batch of a new loader and of a resumed one against
torchdata's StatefulDataLoader (the tool a user would pick for resumable loading), and the
time to the tenth batch: the pipeline makes its first batch in the rank and starts its stage
processes with the second (runtime/data/loader.py), which the tenth batch's time includes.

    .venv/bin/python benchmarks/dataloader.py [--workers 2] [--batches 120] [--startup]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline
from runtime.data.synthetic import SlowStore, SyntheticImages, augment

CASES: dict[str, dict[str, Any]] = {
    "cpu-bound (64px images, crop/flip/4 convs)": {
        "_target_": "runtime.data.synthetic.SyntheticImages",
        "kwargs": {"length": 20000, "size": 64},
        "transform": {"_target_": "runtime.data.synthetic.augment"},
    },
    "io-bound (2 ms per read, 64-token samples)": {
        "_target_": "runtime.data.synthetic.SlowStore",
        "kwargs": {"length": 20000, "latency_ms": 2.0},
        "transform": None,
    },
}


class Transformed(Dataset):
    """What a DataLoader user writes: the dataset with the transform applied in __getitem__."""

    def __init__(self, case: dict[str, Any]) -> None:
        kind = SyntheticImages if "Images" in case["_target_"] else SlowStore
        self.base, self.transform = kind(**case["kwargs"]), case["transform"]

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> Any:
        sample = self.base[index]
        return augment(sample) if self.transform else sample


def _config(case: dict[str, Any], workers: int, batch: int, io_threads: int = 1) -> DataConfig:
    return DataConfig(
        io_threads=io_threads,
        datasets=[{"name": "d", "_target_": case["_target_"], **case["kwargs"]}],
        transform=case["transform"],
        batch_size=batch,
        producers=workers,
        chunk_size=batch // 2,
        start_method="fork",
    )


def _torch_loader(case: dict[str, Any], workers: int, batch: int) -> Iterator[Any]:
    g = torch.Generator().manual_seed(0)
    loader = DataLoader(
        Transformed(case),
        batch_size=batch,
        shuffle=True,
        generator=g,
        num_workers=workers,
        drop_last=True,
        prefetch_factor=4,
    )
    return iter(loader)


def _rate(batches: Iterator[Any], n: int, batch: int) -> float:
    next(batches)  # startup is reported apart from steady throughput
    start = time.perf_counter()
    for _ in range(n):
        next(batches)
    return n * batch / (time.perf_counter() - start)


def _throughput(name: str, case: dict[str, Any], workers: int, batches: int, batch: int) -> None:
    torch_rate = _rate(_torch_loader(case, workers, batch), batches, batch)
    print(f"{name}: DataLoader {torch_rate:8.0f} samples/s")
    for io_threads in (1, 8) if case["transform"] is None else (1,):
        with DataPipeline(_config(case, workers, batch, io_threads)) as pipe:
            gkr_rate = _rate(pipe, batches, batch)
        print(
            f"    GKR pipeline (io_threads={io_threads}) {gkr_rate:8.0f} samples/s"
            f" | ratio {gkr_rate / torch_rate:.2f}"
        )


# Start and exact resume against torchdata's StatefulDataLoader: the tool a user picks for
# resumable loading (a naive skip-ahead would flatter the pipeline), also at as many processes
# as the pipeline's feeder, producers and collators.

STARTUP_TRIALS = 7
EARLY_BATCHES = 10  # the stages' start-up is on the path of the second batch, not the first


def _stateful(case: dict[str, Any], workers: int, batch: int, state: Any = None) -> Any:
    """What a user picks for resumable loading: torchdata's StatefulDataLoader, the same
    dataset, transform, worker count and order settings as `_torch_loader`."""
    from torchdata.stateful_dataloader import StatefulDataLoader  # type: ignore[import-untyped]

    loader = StatefulDataLoader(Transformed(case), batch_size=batch, shuffle=True,
                                generator=torch.Generator().manual_seed(0),
                                num_workers=workers, drop_last=True, prefetch_factor=4)
    if state is not None:
        loader.load_state_dict(state)
    return loader


def _stateful_state(case: dict[str, Any], workers: int, batch: int, at: int) -> Any:
    """StatefulDataLoader's checkpoint after `at` batches."""
    reading = _stateful(case, workers, batch)
    batches = iter(reading)
    for _ in range(at):
        next(batches)
    state = reading.state_dict()
    del batches, reading
    return state


def _early_batches_s(make: Any) -> tuple[float, float]:
    """Seconds from building a loader to holding its first and its EARLY_BATCHES-th batch
    (shutdown not counted)."""
    started = time.perf_counter()
    loader = make()
    batches = iter(loader)
    next(batches)
    first = time.perf_counter() - started
    for _ in range(EARLY_BATCHES - 1):
        next(batches)
    early = time.perf_counter() - started
    if isinstance(loader, DataPipeline):
        loader.close()
    del batches, loader
    return first, early


def _startup(case: dict[str, Any], workers: int, batch: int, at: int) -> None:
    """First batch of a new loader, and of one resumed at batch `at` from its own checkpoint
    (StatefulDataLoader's state_dict; the pipeline's schedule offset), interleaved trials."""
    warnings.filterwarnings("ignore", message=".*set_vital.*")  # torchdata 0.11 on torch 2.13
    warnings.filterwarnings("ignore", message=".*suggested max number of worker.*")
    config = _config(case, workers, batch)
    state = _stateful_state(case, workers, batch, at)
    state_many = _stateful_state(case, workers + 1 + config.collators, batch, at)
    offset = {"epoch": 0, "offset": at * batch}
    processes = workers + 1 + config.collators  # the pipeline's producers, feeder, collators
    makers = {
        ("first batch", "StatefulDataLoader"): lambda: _stateful(case, workers, batch),
        ("first batch", "as many processes"): lambda: _stateful(case, processes, batch),
        ("first batch", "GKR pipeline"): lambda: DataPipeline(config),
        (f"resume at {at}", "StatefulDataLoader"): lambda: _stateful(case, workers, batch, state),
        (f"resume at {at}", "as many processes"): lambda: _stateful(
            case, processes, batch, state_many),
        (f"resume at {at}", "GKR pipeline"): lambda: DataPipeline(config, state=offset),
    }
    times: dict[tuple[str, str], list[float]] = {key: [] for key in makers}
    for _ in range(STARTUP_TRIALS):
        for (what, name), make in makers.items():
            first, early = _early_batches_s(make)
            times[(what, name)].append(first)
            times.setdefault((f"{what}, then to batch {EARLY_BATCHES}", name), []).append(early)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"start and resume, {workers} workers = producers (+ feeder and collator), "
          f"{STARTUP_TRIALS} trials, load average {load}:")
    for what in ("first batch", f"resume at {at}", f"first batch, then to batch {EARLY_BATCHES}",
                 f"resume at {at}, then to batch {EARLY_BATCHES}"):
        ours = statistics.median(times[(what, "GKR pipeline")])
        print(f"  {what}:")
        for name, label in (("StatefulDataLoader", f"StatefulDataLoader, {workers} workers"),
                            ("as many processes", f"StatefulDataLoader, {processes} workers"),
                            ("GKR pipeline", "GKR pipeline")):
            runs = times[(what, name)]
            ratio = "" if name == "GKR pipeline" else (
                f" | GKR/this {ours / statistics.median(runs):.2f}")
            print(f"    {label:>30}: median {statistics.median(runs) * 1e3:5.0f} ms, best "
                  f"{min(runs) * 1e3:4.0f} ms{ratio}")
    print("  target: GKR/StatefulDataLoader <= 1 (goal <= 0.5) at the same worker count")
    print(f"  exact resume: {_exact_resume(config, at)}")


def _exact_resume(config: DataConfig, at: int) -> str:
    """Whether pipelines resumed at batch `at` with other producer and collator counts give
    the batches of the uninterrupted stream (the resume the timings above measured)."""
    follow = 3
    with DataPipeline(config) as whole:
        stream = [next(whole) for _ in range(at + follow)][at:]
    offset = {"epoch": 0, "offset": at * config.batch_size}
    shapes = [(1, 1), (config.producers, config.collators), (config.producers + 1, 2)]
    for producers, collators in shapes:
        shaped = config.model_copy(update={"producers": producers, "collators": collators})
        with DataPipeline(shaped, state=offset) as resumed:
            if not all(_equal(next(resumed), want) for want in stream):
                return f"NO: {producers} producers, {collators} collators differ"
    counts = ", ".join(f"{p}" for p, _ in shapes)
    return f"yes (batches {at}-{at + follow - 1} with {counts} producers = uninterrupted)"


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers = producers")
    parser.add_argument("--batches", type=int, default=120, help="batches timed per loader")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--resume-at", type=int, default=200, help="batch to resume at")
    parser.add_argument("--startup", action="store_true",
                        help="only start and resume (against torchdata's StatefulDataLoader)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.startup:
        _startup(next(iter(CASES.values())), args.workers, args.batch_size, args.resume_at)
        return
    for name, case in CASES.items():
        _throughput(name, case, args.workers, args.batches, args.batch_size)
    _startup(next(iter(CASES.values())), args.workers, args.batch_size, args.resume_at)


if __name__ == "__main__":
    main()
