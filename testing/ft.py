"""The fault-tolerance tests' and benchmark's runs and the failures they inject.

Runs: small training runs with a local teacher (no auxiliary services), a synthetic feature
stream in order (sample i is dataset index i) read through PacedFeatures, CPU ranks on gloo.

Failures: PacedFeatures runs in the loader's producer processes, whose parent is the training
rank; a producer that reads a marked sample, or the first one to read after a test or
benchmark asked for a kill (a `request-kill` file), SIGKILLs its rank (the rank dies as a
process does on a lost node or an OOM kill). A marker file per kill makes each one happen
once, also after a restart. A rank reads the first batch after each (re)start itself
(runtime.data.loader), where no kill happens: the samples it reads stay unmarked.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch

from runtime.data.synthetic import SyntheticFeatures
from runtime.run.config import TrainConfig, build_config
from runtime.telemetry.ledger_store import files_verdict
from runtime.telemetry.ledger_verdict import Entries, Verdict, judge

DATASET = "testing.ft.PacedFeatures"
REQUEST = "request-kill"


class PacedFeatures(SyntheticFeatures):
    """SyntheticFeatures read at most one per `pace_s` while the file `pace` exists in
    `folder` (a test removes it to let the run finish quickly), killing the reading rank on
    each index of `kill_at` once, and once for each index of `kill_after` at the first read
    of a sample at or beyond it (the stream reaches it whoever reads it)."""

    def __init__(self, folder: str, pace_s: float = 0.0, kill_at: tuple[int, ...] = (),
                 kill_after: tuple[int, ...] = (), served: bool = False, **kw: int) -> None:
        """`served`: read only by an auxiliary producer service; a read in a rank's own
        producer fails (the service was bypassed)."""
        super().__init__(**kw)
        self.folder, self.pace_s, self.kill_at = Path(folder), pace_s, set(kill_at)
        self.kill_after, self.served = sorted(kill_after), served

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if mp.parent_process() is not None:  # in a producer, whose parent is the rank
            if self.served:
                raise RuntimeError(f"sample {index} read by a rank's own producer, not by "
                                   "the producer service")
            self._kill(index)
        if self.pace_s and (self.folder / "pace").exists():
            time.sleep(self.pace_s)
        return super().__getitem__(index)

    def _kill(self, index: int) -> None:
        """At most one kill per read: the rank is gone after it."""
        if index in self.kill_at and kill_rank_once(self.folder, f"kill-{index}"):
            return
        due = [a for a in self.kill_after if index >= a
               and not (self.folder / f"kill-after-{a}").exists()]
        if due and kill_rank_once(self.folder, f"kill-after-{due[0]}"):
            return
        if (self.folder / REQUEST).exists():
            kill_on_request(self.folder)


class SlowStepAdam(torch.optim.Adam):
    """Adam whose every step first waits `wait_s`: under torchft the wait falls between the
    group's commit vote and the rank's ledger record (torchft's OptimizerWrapper.step votes,
    then steps), widening the window in which a kill leaves a committed step unrecorded."""

    def __init__(self, params: Any, wait_s: float = 0.0, **kw: Any) -> None:
        super().__init__(params, **kw)
        self.wait_s = wait_s

    def step(self, closure: Any = None) -> Any:
        time.sleep(self.wait_s)
        return super().step(closure)


def request_kill(folder: Path) -> None:
    """Ask for one kill: the first producer of any rank to read next kills its rank."""
    (folder / REQUEST).touch()


def kill_on_request(folder: Path) -> None:
    """Claim the pending request (one producer wins the rename) and kill this rank."""
    claimed = folder / f"claimed-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.rename(folder / REQUEST, claimed)
    except FileNotFoundError:  # another producer was first
        return
    kill_rank_once(folder, f"kill-request-{time.time_ns()}")


def kill_rank_once(folder: Path, name: str) -> bool:
    """SIGKILL the training rank (this producer's parent) unless `name` was done before;
    the marker records when and whom. Whether it killed."""
    parent = mp.parent_process()
    if parent is None or parent.pid is None:
        return False
    try:
        fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as marker:
        json.dump({"at": time.time(), "pid": parent.pid}, marker)
    os.kill(parent.pid, signal.SIGKILL)
    return True


def config(folder: Path, *, pace_s: float = 0.0, kill_at: tuple[int, ...] = (),
           kill_after: tuple[int, ...] = (), batch: int = 4, served: bool = False,
           **sections: dict[str, Any]) -> TrainConfig:
    """A run whose sections are these defaults updated by `sections` (one level deep).
    `served`: the samples come from an auxiliary producer service, `loader`
    (runtime.data.aux_producer), and only from there."""
    folder.mkdir(parents=True, exist_ok=True)
    raw: dict[str, dict[str, Any]] = {
        "run": {"name": "ft", "steps": 20, "log_every": 1, "local_cpus": 8},
        "task": {"_target_": "runtime.tasks.distill.Distillation", "input_dim": 8,
                 "output_dim": 4},
        "model": {"_target_": "runtime.models.mlp.MLP", "input_dim": 8, "hidden_dim": 32,
                  "output_dim": 4},
        "optim": {"_target_": "torch.optim.Adam", "lr": 0.01},
        "layout": {"gpus_per_worker": 0, "backend": "gloo", "numa_affinity": False,
                   "dp_shard": 1},
        "data": {"datasets": [{"name": "features", "_target_": DATASET,
                     "folder": str(folder), "pace_s": pace_s, "kill_at": list(kill_at),
                     "kill_after": list(kill_after), "served": served,
                     "length": 200_000, "dim": 8}],
                 "batch_size": batch, "shuffle": False, "producers": 1, "prefetch_batches": 1,
                 "start_method": "fork"},
        "logging": {"forward_worker_logs": False, "fleet_every_steps": 0},
        "telemetry": {"enabled": False},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    if served:
        service = {"impl": "runtime.data.aux_producer:ProducerService", "ratio": 8,
                   "options": {"data": dict(raw["data"])}}
        raw["aux"] = {"services": {"loader": service}}
        raw["data"]["producer_service"] = "loader"
    # Every rank a whole replica (DDP); with torchft, every rank of each group.
    raw["layout"].setdefault("dp_replicate", -1)
    return build_config(raw, "test")


def with_telemetry(folder: Path, name: str, batch: int = 4, **sections: Any
                   ) -> TrainConfig:
    """`config`'s run named `name`, its data in folder/data and its telemetry, and so its
    sample ledger, in folder/telemetry (GKR_LEDGER_DIR, where set, takes the ledger);
    `sections` as `config` takes them (kill_at, served, and the config's sections)."""
    telemetry = {"enabled": True, "dsn": f"chdb://{folder}/telemetry", "time_collectives": False}
    run = {"name": name, **sections.pop("run", {})}
    return config(folder / "data", batch=batch, telemetry=telemetry, run=run, **sections)


def exactly_once(folder: Path, steps: int, samples: int) -> tuple[Verdict, list[dict[str, Any]]]:
    """The verdict over the ledger files under `folder` and their rows, asserted exactly once
    up to `steps` with `samples` trained."""
    rows = ledger(folder)
    verdict = judge(Entries.from_rows(rows))
    assert verdict.exactly_once, verdict.explain()
    assert (verdict.reached_step, verdict.samples) == (steps, samples)
    return verdict, rows


def ledger(folder: Path) -> list[dict[str, Any]]:
    """Every committed step of every rank incarnation, as the sample ledger holds it (the
    files runtime.telemetry.ledger writes under `folder`, any run)."""
    lines = []
    for path in sorted(folder.rglob("*.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line]
    return lines


def verdict(folder: Path) -> Verdict:
    """The sample ledger's verdict over the one run's files under `folder`, read as the store
    would read them (runtime.telemetry.ledger_store.files_verdict: a partial last line of a
    killed rank skipped and reported)."""
    (run,) = [path.name for path in folder.iterdir() if path.is_dir()]
    return files_verdict(folder, run)


def kills(folder: Path) -> list[dict[str, Any]]:
    """The kills PacedFeatures made: when, and which pid."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("kill-*"))]
