"""DiLoCo's communication against plain data parallelism, over the same steps, in one run.

Both sides train the same MLP for the same number of steps on the same number of processes:

* plain data parallel: every step, the ranks all-reduce the gradient over gloo (one flat
  tensor, as a DDP bucket would). Bytes sent are measured per rank from `/proc/<pid>/io`
  (`wchar` counts what gloo writes to its sockets; a ring all-reduce sends 2(K-1)/K of the
  payload per rank); all-reduce time is timed per step;
* DiLoCo: every H steps each learner sends its weights to the synchroniser
  (`python -m runtime.diloco`, ZeroMQ TCP on loopback) and waits for the merge (barrier
  mode). Bytes are the wire format's frames, counted by the learner; sync time is how long
  training waited, and the synchroniser's round time is from its log. DiLoCo runs twice, over
  a plaintext link and over CURVE (encrypted and authenticated, as every real experiment
  runs), and the round and sync times of both are printed with their ratio; then one
  learner's sync round trips alone, plaintext and CURVE taking turns (less noisy: no
  waiting for other learners).

Loopback has no WAN latency or bandwidth limit, so the times show the overheads of each
path here; the byte ratio is what carries over to cross-region links.

    .venv/bin/python benchmarks/diloco.py [--learners 3] [--steps 120] [--inner 20] [--quick]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from runtime.diloco.config import DilocoConfig, SynchroniserConfig
from runtime.diloco.keys import SYNCHRONISER, client_keys
from runtime.diloco.learner import DilocoLearner
from runtime.diloco.link import JOIN, LEAVE, SYNC, LearnerLink
from runtime.diloco.local import run_keys
from runtime.diloco.synchroniser import Synchroniser

ROOT = Path(__file__).resolve().parents[1]
DIM = 256
MB = 1e6


def _model(hidden: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(DIM, hidden), nn.GELU(), nn.Linear(hidden, hidden),
                         nn.GELU(), nn.Linear(hidden, DIM))


def _loss(net: nn.Module, rank: int, step: int) -> torch.Tensor:
    x = torch.randn(32, DIM, generator=torch.Generator().manual_seed(rank * 100_003 + step))
    return nn.functional.mse_loss(net(x), torch.sin(x))


def _wchar() -> int:
    with open(f"/proc/{os.getpid()}/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("wchar"))


def _grad(param: nn.Parameter) -> torch.Tensor:
    assert param.grad is not None
    return param.grad


def _dp_rank(rank: int, args: argparse.Namespace, port: int, out: Any) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.learners)
    net = _model(args.hidden)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    times, written = [], _wchar()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        _loss(net, rank, step).backward()
        grads = torch.cat([_grad(p).reshape(-1) for p in net.parameters()])
        started = time.perf_counter()
        dist.all_reduce(grads)
        times.append(time.perf_counter() - started)
        grads /= args.learners
        offset = 0
        for param in net.parameters():
            _grad(param).copy_(grads[offset:offset + param.numel()].view_as(param))
            offset += param.numel()
        optimizer.step()
    out.put({"sent": _wchar() - written, "times": times})
    dist.destroy_process_group()


def _learner(index: int, args: argparse.Namespace, link: tuple[str, Path | None],
             out: Any) -> None:
    torch.set_num_threads(1)
    net = _model(args.hidden)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    endpoint, keys = link
    name = f"learner-{index}"
    config = DilocoConfig(enabled=True, endpoint=endpoint, learner=name, index=index,
                          learners=args.learners, inner_steps=args.inner,
                          keys=str(keys / name) if keys else None, plaintext=keys is None)
    learner = DilocoLearner(config, net, rank=0)
    learner.join()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        _loss(net, index, step).backward()
        optimizer.step()
        learner.after_step(step)
    learner.close()
    out.put({"records": [(r.sent, r.received, r.seconds) for r in learner.records]})


def _run(target: Any, args: argparse.Namespace, extra: Any) -> list[dict[str, Any]]:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [context.Process(target=target, args=(i, args, extra, out))
                 for i in range(args.learners)]
    for process in processes:
        process.start()
    results = [out.get(timeout=900) for _ in processes]
    for process in processes:
        process.join()
    return results


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _diloco(args: argparse.Namespace, folder: Path,
            curve: bool) -> tuple[list[dict[str, Any]], list[float]]:
    """One DiLoCo run: with `curve`, keys made for it as a local run makes them
    (runtime.diloco.local.run_keys) and the link authenticated and encrypted; without,
    plaintext."""
    folder.mkdir()
    log, out = folder / "sync.log", folder / "sync.out"
    names = [f"learner-{i}" for i in range(args.learners)]
    keys = folder / "keys" if curve else None
    link = ["--keys", str(run_keys(keys, names)[SYNCHRONISER])] if keys else ["--plaintext"]
    with log.open("wb") as err, out.open("wb") as std:
        sync = subprocess.Popen([sys.executable, "-m", "runtime.diloco", "--bind",
                                 "tcp://127.0.0.1:*", "--learners", ",".join(names), *link],
                                cwd=ROOT, stdout=std, stderr=err)
    while not (found := re.search(r"listening on (\S+)", out.read_text())):
        if sync.poll() is not None:
            raise SystemExit(f"the synchroniser failed: {log.read_text()}")
        time.sleep(0.1)
    results = _run(_learner, args, (found[1], keys))
    sync.wait(120)
    rounds = [float(m[1]) for m in re.finditer(r"MB out, ([\d.]+) s", log.read_text())]
    return results, rounds


def _ms(values: list[float], processes: int) -> str:
    return (f"p50 {statistics.median(values) * 1e3:.1f} ms, "
            f"{sum(values) / processes:.2f} s in all per process")


def _report(args: argparse.Namespace, dp: list[dict[str, Any]],
            learners: list[dict[str, Any]], rounds: list[float]) -> None:
    params = sum(p.numel() for p in _model(args.hidden).parameters())
    k = args.learners
    print(f"model: {params:,} parameters ({params * 4 / MB:.2f} MB float32); {k} processes "
          f"each side, {args.steps} steps, H = {args.inner}")
    dp_sent = statistics.mean(rank["sent"] for rank in dp)
    dp_times = [t for rank in dp for t in rank["times"]]
    print(f"plain data parallel: {dp_sent / MB:.1f} MB sent per rank "
          f"({dp_sent / args.steps / MB:.2f} MB per step; ring: 2(K-1)/K x payload = "
          f"{2 * (k - 1) / k * params * 4 / MB:.2f} MB); all-reduce per step {_ms(dp_times, k)}")
    records = [r for learner in learners for r in learner["records"]]
    sent = statistics.mean(sum(r[0] for r in learner["records"]) for learner in learners)
    received = statistics.mean(sum(r[1] for r in learner["records"]) for learner in learners)
    syncs = len(learners[0]["records"])
    print(f"DiLoCo: {syncs} syncs; per sync per learner {records[0][0] / MB:.2f} MB sent, "
          f"{records[0][1] / MB:.2f} MB received; {sent / MB:.1f} MB sent and "
          f"{received / MB:.1f} MB received per learner in all")
    print(f"DiLoCo sync wait (barrier: includes waiting for the slowest learner) "
          f"{_ms([r[2] for r in records], k)}; synchroniser round (first snapshot in to last "
          f"merge out) {_ms(rounds, 1)}")
    print(f"ratio, bytes sent per rank/learner: plain DP / DiLoCo = {dp_sent / sent:.1f}x "
          f"(sent + received: {2 * dp_sent / (sent + received):.1f}x); time spent "
          f"communicating: {sum(dp_times) / sum(r[2] for r in records):.1f}x")


def _report_curve(args: argparse.Namespace, plain: tuple[list[dict[str, Any]], list[float]],
                  curve: tuple[list[dict[str, Any]], list[float]]) -> None:
    """The same DiLoCo run over a plaintext link and over CURVE (encrypted, authenticated)."""
    k = args.learners
    for label, index in (("synchroniser round", 1), ("learner sync wait", 0)):
        values = [_waits(run) if index == 0 else run[1] for run in (plain, curve)]
        medians = [statistics.median(v) for v in values]
        print(f"{label}: plaintext {_ms(values[0], k if index == 0 else 1)}; CURVE "
              f"{_ms(values[1], k if index == 0 else 1)}; CURVE / plaintext p50 = "
              f"{medians[1] / medians[0]:.2f}x")


def _one_learner_rounds(args: argparse.Namespace, folder: Path) -> dict[bool, list[float]]:
    """One learner's sync round trips (its weights in, the merge out) against a synchroniser
    on a thread, plaintext and CURVE taking turns, so that the machine's load meets both
    alike: the link's own cost, without waiting for other learners."""
    params = sum(p.numel() for p in _model(args.hidden).parameters())
    weights = torch.randn(params)
    times: dict[bool, list[float]] = {False: [], True: []}
    for turn in range(2 * args.turns):
        curve = bool(turn % 2)
        keys = run_keys(folder / f"turn-{turn}", ["a"]) if curve else None
        sync = Synchroniser(SynchroniserConfig(
            bind="tcp://127.0.0.1:*", learners=("a",), outer={"lr": 1.0, "momentum": 0.0,
                                                              "nesterov": False},
            keys=str(keys[SYNCHRONISER]) if keys else None, plaintext=keys is None))
        address = sync.bind()
        thread = threading.Thread(target=sync.serve, daemon=True)
        thread.start()
        link = LearnerLink(address, "a", client_keys(keys["a"], "a") if keys else None)
        link.wait(link.submit(JOIN, 0, weights), 60)
        for round_ in range(args.inner):
            started = time.perf_counter()
            assert link.wait(link.submit(SYNC, round_, weights), 60) is not None
            times[curve].append(time.perf_counter() - started)
        link.wait(link.submit(LEAVE, args.inner), 60)
        link.close()
        thread.join(60)
    return times


def _report_one_learner(times: dict[bool, list[float]]) -> None:
    plain, curve = (statistics.median(times[mode]) for mode in (False, True))
    print(f"one learner's sync round trip ({len(times[True])} each, taking turns): plaintext "
          f"p50 {plain * 1e3:.1f} ms, CURVE p50 {curve * 1e3:.1f} ms; CURVE / plaintext = "
          f"{curve / plain:.2f}x")


def _waits(run: tuple[list[dict[str, Any]], list[float]]) -> list[float]:
    return [r[2] for learner in run[0] for r in learner["records"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=3)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--quick", action="store_true", help="A small model, few steps.")
    parser.add_argument("--turns", type=int, default=6,
                        help="Plaintext and CURVE synchronisers each, for the round trips.")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.inner, args.hidden = 40, 10, 256
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} CPUs, load average {load} (other work shares them)")
    dp = _run(_dp_rank, args, _free_port())
    with tempfile.TemporaryDirectory() as folder:
        plain = _diloco(args, Path(folder) / "plaintext", curve=False)
        curve = _diloco(args, Path(folder) / "curve", curve=True)
        rounds = _one_learner_rounds(args, Path(folder) / "one")
    _report(args, dp, *curve)
    _report_curve(args, plain, curve)
    _report_one_learner(rounds)


if __name__ == "__main__":
    main()
