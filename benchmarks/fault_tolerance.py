"""Live fault tolerance (torchft replica groups) against the default recovery (Ray Train
restarts the worker group from the last committed checkpoint), in one run.

The same small distillation job (2 CPU ranks on gloo, each reading its loader pipeline, which
reads a sample per --pace-ms so that a step takes about as long on any machine) runs four
times: with torchft as 2 replica groups of 1 rank and as one plain worker group of 2 ranks,
both checkpointing every --interval steps, each without failures and with a rank killed by
SIGKILL every --every steps (when the driver prints step N x every, the next sample read by
any rank kills that rank, testing/ft.py). Prints, per run:

* goodput: committed steps per second, from the first step to the last (worker start-up,
  the same in every run, is left out; steps trained again after a restart count once);
* for each kill, the time from the kill to the next step that makes new progress (torchft:
  the survivors' next commit; restart: the first step beyond the last one done before);

then the ratios of the runs with failures to the runs without, and torchft to the restart
baseline.

    .venv/bin/python benchmarks/fault_tolerance.py [--quick]
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

import ray

from runtime.run.config import TrainConfig
from runtime.train.driver import TrainResult, run_training
from testing.ft import config, kills, request_kill

ROOT = Path(__file__).resolve().parents[1]  # Ray's workers import the checkout

BATCH, WORLD = 8, 2


@dataclass(frozen=True)
class Figures:
    """One run's outcome."""

    goodput: float  # committed steps per second
    recoveries: list[float]  # seconds from each kill to the next new step


class KillEvery:
    """The driver's printer: asks for a kill each time the run reaches another `every` steps."""

    def __init__(self, folder: Path, every: int) -> None:
        self.folder, self.every, self.next = folder, every, every

    def __call__(self, line: str) -> None:
        found = re.match(r"step (\d+)/", line)
        if self.every and found and int(found.group(1)) >= self.next:
            request_kill(self.folder)
            self.next += self.every


def _run(folder: Path, steps: int, failures: int, torchft: bool, interval: int,
         pace_s: float) -> TrainConfig:
    """A run that Ray Train may restart `failures` times (per group with torchft)."""
    sections: dict[str, Any] = {
        "run": {"steps": steps, "max_failures": failures},
        "layout": {"max_world_size": WORLD},
        "model": {"hidden_dim": 256, "depth": 3},
        "checkpoint": {"uri": str(folder / "ckpt"), "interval_steps": interval, "keep_last": 2},
    }
    if torchft:
        sections["fault_tolerance"] = {"enabled": True, "replica_groups": WORLD,
                                       "heartbeat_timeout_s": 1.0, "join_timeout_s": 5.0}
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "pace").touch()
    return config(folder / "data", pace_s=pace_s, batch=BATCH, **sections)


def _figures(result: TrainResult, killed_at: list[float]) -> Figures:
    times = list(result.step_times)
    first = min(at for _, at in times)
    last = max(at for _, at in times)
    done = max(step for step, _ in times) - min(step for step, _ in times)
    return Figures(done / (last - first), [_recovery(times, kill) for kill in killed_at])


def _recovery(times: list[tuple[int, float]], kill: float) -> float:
    """Seconds from `kill` to the first step beyond every step finished before it."""
    before = max((step for step, at in times if at <= kill), default=0)
    after = [at for step, at in times if at > kill and step > before]
    return min(after) - kill if after else float("nan")


def measure(name: str, steps: int, every: int, torchft: bool, args: argparse.Namespace
            ) -> Figures:
    with tempfile.TemporaryDirectory(prefix="gkr-ft-bench-") as tmp:
        folder = Path(tmp)
        failures = (steps - 1) // every if every else 0
        run = _run(folder, steps, failures, torchft, args.interval, args.pace_ms / 1000)
        result = run_training(run, echo=KillEvery(folder / "data", every))
        killed = sorted(k["at"] for k in kills(folder / "data"))
        figures = _figures(result, killed)
    recoveries = ", ".join(f"{s:.2f}" for s in figures.recoveries) or "-"
    print(f"{name:<34} goodput {figures.goodput:7.2f} steps/s   kills {len(killed)}   "
          f"kill -> next new step (s): {recoveries}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and kills")
    parser.add_argument("--every", type=int, default=0, help="steps between kills")
    parser.add_argument("--interval", type=int, default=50, help="checkpoint interval")
    parser.add_argument("--pace-ms", type=float, default=5.0, help="read time of a sample")
    args = parser.parse_args()
    steps = 600 if args.quick else 1200
    every = args.every or (250 if args.quick else 300)
    ray.init(num_cpus=6, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        print(f"{steps} steps, {WORLD} ranks x {BATCH} samples, {args.pace_ms:g} ms a sample; "
              f"a rank killed about every {every} steps; checkpoints every {args.interval} "
              "steps")
        ft_clean = measure("torchft, no failures", steps, 0, True, args)
        ft_kill = measure("torchft, failures", steps, every, True, args)
        rt_clean = measure("restart from checkpoint, no failures", steps, 0, False, args)
        rt_kill = measure("restart from checkpoint, failures", steps, every, False, args)
    finally:
        ray.shutdown()
    print(f"goodput kept under failures: torchft {ft_kill.goodput / ft_clean.goodput:.2f}, "
          f"restart {rt_kill.goodput / rt_clean.goodput:.2f}")
    print(f"goodput with failures, torchft / restart: {ft_kill.goodput / rt_kill.goodput:.2f}")
    if ft_kill.recoveries and rt_kill.recoveries:
        ratio = mean(rt_kill.recoveries) / mean(ft_kill.recoveries)
        print(f"mean kill -> next new step: torchft {mean(ft_kill.recoveries):.2f} s, restart "
              f"{mean(rt_kill.recoveries):.2f} s ({ratio:.1f}x faster with torchft)")


if __name__ == "__main__":
    main()
