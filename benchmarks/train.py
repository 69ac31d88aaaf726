"""Training throughput of the driver against a plain torchrun script of the same training.

1. The driver as `make demo` runs it: `gkr run --local examples/train/tiny.yaml` (Ray, the
   data pipeline's producer processes, telemetry into a chDB store, async DCP checkpoints
   every 20 steps), its steps read from the store's `train_steps` rows.
2. What a user would otherwise run: `torchrun --nproc-per-node 2 benchmarks/plain_fsdp.py`
   with the same config: the same transformer, data, FSDP2 units, AdamW, schedule, clipping,
   batch and sequence length, in plain torch.

3. The sample ledger's cost (runtime.telemetry.ledger, issue 24): the driver run again with
   `telemetry.ledger=false`, alternating, and the ratio of their step times (goal: the
   ledger adds under 1%); and one `LedgerWriter.record` timed alone, as a share of a step.

Both report the wall time at which each step ended. Throughput is the steady state: the
tokens of every step after the first logged interval (`run.log_every` steps of warm-up:
start-up of the data workers, first allocations) over the time they took. Start-up is the
time from launching the command to the end of its first step. With `--repeats` the two
alternate, so a neighbour's load falls on both; medians are printed.

    .venv/bin/python benchmarks/train.py [--steps 80] [--repeats 1] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.data.schedule import Span
from runtime.data.tokens import TokenWindows
from runtime.telemetry.ledger import LedgerWriter
from runtime.telemetry.store import Store
from runtime.train.compose import load_config

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "examples/train/tiny.yaml"
BIN = Path(sys.executable).parent
GOAL = 0.95  # driver tokens/s over plain torchrun's
LEDGER_GOAL = 1.01  # step time with the sample ledger over without
RUN_ID = re.compile(r"^run (\S+) finished", re.MULTILINE)


@dataclass(frozen=True)
class Timing:
    """One run: when it was launched, when each step ended (wall clock), tokens per step."""

    launched: float
    step_walls: list[float]
    tokens_per_step: float

    def startup_s(self) -> float:
        return self.step_walls[0] - self.launched

    def tokens_per_s(self, warmup: int) -> float:
        walls = self.step_walls[warmup - 1:]
        return self.tokens_per_step * (len(walls) - 1) / (walls[-1] - walls[0])


def _stream(argv: list[str], label: str) -> tuple[float, str]:
    """Run `argv` from the repository root, echoing its output; (launch time, output)."""
    launched = time.time()
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith(("step ", "run ", "telemetry:")):
            print(f"  {label} | {line.rstrip()[:110]}", flush=True)
    if process.wait() != 0:
        sys.exit(f"{label} failed (exit {process.returncode}):\n{''.join(lines[-30:])}")
    return launched, "".join(lines)


def driver(overrides: list[str], scratch: Path) -> Timing:
    """`gkr run --local` with its store and checkpoints in `scratch`; steps from the store."""
    dsn = f"chdb://{scratch / 'telemetry'}"
    Store.connect(dsn).close()  # migrated up front, as the default store is after one run
    launched, output = _stream([str(BIN / "gkr"), "run", "--local", str(CONFIG),
                                f"run.name=bench-train-{int(time.time())}",
                                f"checkpoint.uri={scratch / 'checkpoints'}",
                                f"telemetry.dsn={dsn}", *overrides], "driver")
    found = RUN_ID.search(output)
    assert found, "the driver did not say which run finished"
    with Store.connect(dsn, migrate=False) as store:
        rows = store.query(
            "SELECT step, toUnixTimestamp64Micro(ts) / 1e6, tokens FROM train_steps "
            "WHERE run = {run:String} AND rank = 0 ORDER BY step", {"run": found.group(1)}).rows
        ranks = store.query("SELECT uniqExact(rank) FROM train_steps WHERE run = {run:String}",
                            {"run": found.group(1)}).rows[0][0]
    return Timing(launched, [float(wall) for _, wall, _ in rows],
                  float(statistics.median(tokens for *_, tokens in rows)) * int(ranks))


def plain(overrides: list[str]) -> Timing:
    """The torchrun script; its last line is rank 0's JSON."""
    launched, output = _stream([str(BIN / "torchrun"), "--nproc-per-node", "2",
                                str(REPO / "benchmarks/plain_fsdp.py"), str(CONFIG),
                                *overrides], "torchrun")
    last = json.loads(output.strip().splitlines()[-1])
    return Timing(launched, last["step_walls"], float(last["tokens_per_step"]))


def record_s(calls: int = 20_000) -> float:
    """Seconds one LedgerWriter.record takes (a step of two micro-batches), on a real file."""
    spans = [Span(1, 2, 4, 4, 0, 8, 10_000), Span(1, 2, 12, 4, 8, 8, 10_000)]
    with tempfile.TemporaryDirectory(prefix="bench-ledger-") as scratch, \
            LedgerWriter(Path(scratch), "bench", -1, 1, "fresh", 0) as writer:
        began = time.perf_counter()
        for step in range(calls):
            writer.record(step, spans)
        return (time.perf_counter() - began) / calls


def _ledger_figures(on: list[Timing], off: list[Timing], warmup: int) -> None:
    """Step time with the ledger over without (tokens/s the other way round)."""
    ratio = (statistics.median(t.tokens_per_s(warmup) for t in off)
             / statistics.median(t.tokens_per_s(warmup) for t in on))
    step_s = 1 / statistics.median(len(t.step_walls) / (t.step_walls[-1] - t.step_walls[0])
                                   for t in on)
    cost = record_s()
    print(f"sample ledger: step time with/without {ratio:.4f} (goal < {LEDGER_GOAL}); one "
          f"record {cost * 1e6:.1f} us = {cost / step_s:.3%} of a {step_s * 1e3:.1f} ms step")


def _figures(label: str, timings: list[Timing], warmup: int) -> tuple[float, float]:
    rates = [t.tokens_per_s(warmup) for t in timings]
    startups = [t.startup_s() for t in timings]
    rate, startup = statistics.median(rates), statistics.median(startups)
    each = ", ".join(f"{r:,.0f}" for r in rates)
    print(f"{label:<34} {rate:8,.0f} tokens/s (runs: {each}); "
          f"command to first step {startup:5.1f} s")
    return rate, startup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each, alternating")
    parser.add_argument("overrides", nargs="*", help="config overrides for both (key=value)")
    args = parser.parse_args()
    overrides = [f"run.steps={args.steps}", *args.overrides]
    config = load_config(CONFIG, overrides)
    assert config.data is not None
    TokenWindows(**config.data.datasets[0].kwargs)  # prepared before either clock starts
    warmup = config.run.log_every
    if args.steps < 2 * warmup:
        sys.exit(f"--steps {args.steps}: at least {2 * warmup} (twice run.log_every)")
    drivers, plains, unledgered = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-train-") as scratch:
            drivers.append(driver(overrides, Path(scratch)))
        with tempfile.TemporaryDirectory(prefix="bench-train-") as scratch:
            unledgered.append(driver([*overrides, "++telemetry.ledger=false"], Path(scratch)))
        plains.append(plain(overrides))
    print(f"\n{args.steps} steps of {CONFIG.relative_to(REPO)}, steady state after step "
          f"{warmup}, {args.repeats} run(s) each")
    ours, ours_start = _figures("gkr run --local (driver)", drivers, warmup)
    theirs, theirs_start = _figures("torchrun plain_fsdp.py (plain)", plains, warmup)
    print(f"ratio driver/plain tokens/s: {ours / theirs:.3f} (goal >= {GOAL}); start-up "
          f"{ours_start - theirs_start:+.1f} s")
    _ledger_figures(drivers, unledgered, warmup)
    print(f"rerun: .venv/bin/python benchmarks/train.py --steps {args.steps} "
          f"--repeats {args.repeats} {' '.join(args.overrides)}".rstrip())


if __name__ == "__main__":
    main()
