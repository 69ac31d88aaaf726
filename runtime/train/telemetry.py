"""A training run's telemetry: the driver opens the store, every rank writes its rows.

Each rank writes one `train_steps` row per optimizer step (its own loss, step time,
samples/s, tokens/s, MFU and peak memory: runtime.telemetry.throughput), one `collectives`
row per gradient all-reduce (timed on gloo; on GPUs NCCL Inspector's records arrive through
Fluent Bit, and the rank's `rank_processes` row maps their communicator ranks to its own),
and rank 0 the FleetMonitor summaries. The
driver records the run's start and end as events and, at the end, says what was written and
how to look at it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import ray
import torch

from runtime.fleet import ServiceSummary, summary_dict
from runtime.identity import Role
from runtime.run.config import TrainConfig
from runtime.telemetry.collectives import CollectiveTimer, time_gradients
from runtime.telemetry.flight_recorder import dump_rank
from runtime.telemetry.identity import identity
from runtime.telemetry.inspector import announce_process
from runtime.telemetry.sink import sink_for, start_store, stop_store
from runtime.telemetry.store import Store, default_dsn, describe, sql_file
from runtime.telemetry.throughput import memory_peaks, mfu, peak_flops, summary_line
from runtime.telemetry.writer import TelemetryWriter

log = logging.getLogger(__name__)
# What the driver's closing line counts: (table, label).
SUMMARY = (("train_steps", "step rows"), ("collectives", "collective samples"),
           ("fleet_summaries", "fleet summaries"), ("flight_recorder", "flight-recorder entries"))


# NCCL Inspector's output folder (NVIDIA/nccl plugins/profiler/inspector README); rendered into
# GPU pods by the generator (generator/telemetry.py).
INSPECTOR_DUMP_DIR = "NCCL_INSPECTOR_DUMP_DIR"


def route_inspector_dumps(run_id: str, environ: MutableMapping[str, str] | None = None) -> None:
    """Point NCCL Inspector at the run's subfolder of the pod's dump folder, so the path names
    the run for Fluent Bit. Called before the rank's first NCCL collective: the plugin reads
    the variable when the first communicator is made (PyTorch makes them lazily). Where a
    communicator came first, the files stay in the job's folder, which Fluent Bit reads too."""
    env = os.environ if environ is None else environ
    base = env.get(INSPECTOR_DUMP_DIR)
    if base and not base.rstrip("/").endswith(f"/{run_id}"):
        folder = os.path.join(base, run_id)
        os.makedirs(folder, exist_ok=True)
        env[INSPECTOR_DUMP_DIR] = folder


@dataclass(frozen=True)
class Destination:
    """Where the run's rows go: resolved once by the driver, given to every rank."""

    dsn: str


def destination(config: TrainConfig) -> Destination | None:
    """The run's store, or None when telemetry is off."""
    section = config.telemetry
    return Destination(section.dsn or default_dsn()) if section.enabled else None


class RankTelemetry:
    """One rank's rows: per-step metrics, timed all-reduces, and (rank 0) fleet summaries.

    Also a `FleetSink`, so the FleetReporter's summaries land in `fleet_summaries`.
    `flops_per_token`: the training FLOPs one token costs this rank's device (the model's
    `flops_per_token(seq_len)`, divided by the tensor-parallel degree: a TP group shares
    its tokens' work); None: MFU is not recorded.
    """

    def __init__(self, config: TrainConfig, where: Destination, run_id: str, rank: int,
                 world_size: int, nnodes: int, flops_per_token: float | None = None) -> None:
        section = config.telemetry
        self.writer = TelemetryWriter(sink_for(run_id, where.dsn), identity(run_id, Role.WORKER,
                                      rank), capacity=section.queue_rows)
        announce_process(self.writer)  # NCCL Inspector's records then map to this rank
        self.timer = CollectiveTimer(self.writer, f"{run_id}/dp", "DDP gradients", world_size,
                                     nnodes) if section.time_collectives else None
        delay = section.inject_delay
        self.delay_s = delay.seconds if delay is not None and delay.rank == rank else 0.0
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops(section.peak_tflops, os.environ)
        self.last = time.perf_counter()

    def watch(self, model: torch.nn.Module) -> None:
        """Time the model's gradient all-reduces."""
        if self.timer is not None:
            time_gradients(model, self.timer)

    def before_backward(self) -> None:
        """The injected straggler's delay: it reaches the gradient all-reduce late."""
        if self.delay_s:
            time.sleep(self.delay_s)

    def step(self, step: int, loss: torch.Tensor, samples: int, tokens: int) -> None:
        """One optimizer step of this rank: the samples and tokens it computed on since the
        last step (or since this object was made). The loss is read off the training thread."""
        now = time.perf_counter()
        elapsed, self.last = max(now - self.last, 1e-9), now
        tokens_per_s = tokens / elapsed
        self.writer.write("train_steps", {
            "step": step, "loss": loss, "step_time_s": elapsed,
            "samples_per_s": samples / elapsed, "tokens_per_s": tokens_per_s, "tokens": tokens,
            "mfu": mfu(tokens_per_s, self.flops_per_token, self.peak_flops), **memory_peaks(),
        })

    def emit(self, step: int, summaries: Mapping[str, ServiceSummary]) -> None:
        """FleetSink: one row per service."""
        for summary in summaries.values():
            self.writer.write("fleet_summaries", {"step": step, **summary_dict(summary)})

    def close(self) -> None:
        """Add this rank's Flight Recorder entries (after a failure too: they show which
        collective each rank reached), then write what is queued."""
        try:
            dump_rank(self.writer)
        except Exception as error:  # a missing recorder must not hide the run's own outcome
            log.warning("flight recorder: no dump from this rank: %s", error)
        self.writer.close()


class RunTelemetry:
    """The driver's side: the store's lifetime, the run's events, the closing summary."""

    def __init__(self, where: Destination, run_id: str) -> None:
        self.where, self.run_id = where, run_id
        self.actor = start_store(run_id, where.dsn)
        self.writer = TelemetryWriter(sink_for(run_id, where.dsn),
                                      identity(run_id, Role.HEAD))

    def event(self, reason: str, message: str, severity: str = "Normal") -> None:
        """A run-level event (started, succeeded, failed)."""
        self.writer.write("events", {
            "source": "driver", "object_kind": "Run", "object_name": self.run_id,
            "reason": reason, "severity": severity, "message": message, "count": 1,
        })

    def close(self) -> str:
        """Flush, release the store, and say what the run wrote and how to look at it."""
        self.writer.close()
        try:
            counts = self._counts()
            throughput = summary_line(*self._query(sql_file("run_throughput.sql"),
                                                   {"run": self.run_id})[0])
        finally:
            stop_store(self.actor)
        where = describe(self.where.dsn)
        written = ", ".join(f"{counts.get(table, 0)} {label}" for table, label in SUMMARY)
        rate = f" ({throughput})" if throughput else ""
        return (f"telemetry: {written}{rate} in {where}; "
                f"see `gkr stragglers {self.run_id}` and `gkr ui`")

    def _counts(self) -> dict[str, int]:
        sql = " UNION ALL ".join(
            f"SELECT '{table}', count() FROM {table} WHERE run = {{run:String}}"
            for table, _ in SUMMARY)
        rows = self._query(sql, {"run": self.run_id})
        return {table: count for table, count in rows}

    def _query(self, sql: str, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        if self.actor is not None:
            return list(ray.get(self.actor.query.remote(sql, parameters)).rows)
        with Store.connect(self.where.dsn, migrate=False) as store:
            return store.query(sql, parameters).rows
