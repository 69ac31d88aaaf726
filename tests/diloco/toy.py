"""A toy task the DiLoCo tests and the benchmark train in real processes: a small MLP fits a
fixed random teacher; batch `k` of learner `i` is a pure function of (`i`, `k`).

`python -m tests.diloco.toy learner ...` trains as a learner of a running synchroniser
(`runtime.diloco`), `... torchft ...` as one replica group of torchft's own
`torchft.local_sgd.DiLoCo` (Manager, gloo process group, a Lighthouse given by address),
and `... plain ...` without any of it. Each writes a JSON result: the evaluation loss before
and after, the final weights' checksum vector, and the learner's sync records.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch import nn

from runtime.diloco.config import DilocoConfig, OuterOptimizer
from runtime.diloco.learner import DilocoLearner

DIM_IN, HIDDEN, DIM_OUT, BATCH = 16, 32, 4, 32
INNER_LR = 0.01


def model() -> nn.Module:
    torch.manual_seed(0)  # every learner and replica starts from the same weights
    return nn.Sequential(nn.Linear(DIM_IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, DIM_OUT))


def _teacher(x: torch.Tensor) -> torch.Tensor:
    weights = torch.randn(DIM_IN, DIM_OUT, generator=torch.Generator().manual_seed(1234)) / 4
    return torch.sin(x @ weights)


def batch(learner: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    seed = learner * 100_003 + step
    x = torch.randn(BATCH, DIM_IN, generator=torch.Generator().manual_seed(seed))
    return x, _teacher(x)


def eval_loss(net: nn.Module) -> float:
    x = torch.randn(1024, DIM_IN, generator=torch.Generator().manual_seed(999))
    with torch.no_grad():
        return float(nn.functional.mse_loss(net(x), _teacher(x)))


def step(net: nn.Module, optimizer: torch.optim.Optimizer, learner: int, index: int) -> float:
    x, y = batch(learner, index)
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(net(x), y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def inner_optimizer(net: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(net.parameters(), lr=INNER_LR)


def _flat(net: nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).tolist()


def _write(out: Path, result: dict[str, Any]) -> None:
    out.write_text(json.dumps(result))


def run_plain(args: argparse.Namespace) -> dict[str, Any]:
    net = model()
    optimizer, before = inner_optimizer(net), eval_loss(net)
    for index in range(1, args.steps + 1):
        step(net, optimizer, args.index, index)
    return {"before": before, "after": eval_loss(net), "weights": _flat(net)}


def _pause(args: argparse.Namespace, index: int) -> None:
    """Stand still before step `pause_at` (the tests kill a learner there, mid-round)."""
    if index == args.pause_at:
        Path(args.out).with_suffix(".paused").write_text(str(os.getpid()))
        signal.pause()
    if args.step_delay:
        time.sleep(args.step_delay)


def run_learner(args: argparse.Namespace, rank: int = 0) -> dict[str, Any]:
    """One learner; with --ranks N, rank `rank` of its N data-parallel ranks (DDP, gloo)."""
    config = DilocoConfig(enabled=True, endpoint=args.endpoint, learner=args.learner,
                          keys=args.keys, plaintext=args.keys is None,
                          index=args.index, learners=args.learners, inner_steps=args.inner,
                          mode=args.mode, merge=args.merge, round_timeout_s=args.timeout / 2,
                          timeout_s=args.timeout)
    net = model()
    if args.ranks > 1:
        net = nn.parallel.DistributedDataParallel(net)
    optimizer = inner_optimizer(net)
    learner = DilocoLearner(config, net, rank=rank)
    learner.join()
    before = eval_loss(net)
    for index in range(1, args.steps + 1):
        _pause(args, index)
        step(net, optimizer, args.index * args.ranks + rank, index)
        learner.after_step(index)
    learner.close()
    return {"before": before, "after": eval_loss(net), "weights": _flat(net),
            "records": [asdict(record) for record in learner.records]}


def _rank(rank: int, args: argparse.Namespace, store: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=args.ranks)
    result = run_learner(args, rank)
    _write(Path(args.out).with_suffix(f".rank{rank}.json"), result)
    dist.destroy_process_group()


def run_ranks(args: argparse.Namespace) -> dict[str, Any]:
    """A learner of several ranks; its result is rank 0's, with every rank's weights."""
    import torch.multiprocessing as mp

    store = Path(args.out).with_suffix(".store")
    mp.spawn(_rank, args=(args, str(store)), nprocs=args.ranks)
    results = [json.loads(Path(args.out).with_suffix(f".rank{r}.json").read_text())
               for r in range(args.ranks)]
    return {**results[0], "rank_weights": [result["weights"] for result in results]}


def run_torchft(args: argparse.Namespace) -> dict[str, Any]:
    """One replica group of torchft's DiLoCo, with torchft's own parts only."""
    import torch.distributed as dist
    from torchft.local_sgd import DiLoCo
    from torchft.manager import Manager
    from torchft.process_group import ProcessGroupGloo

    net = model()
    optimizer = inner_optimizer(net)
    outer = OuterOptimizer(lr=args.outer_lr, momentum=args.outer_momentum,
                           nesterov=args.outer_momentum > 0)
    outer_optimizer = torch.optim.SGD(net.parameters(), lr=outer.lr, momentum=outer.momentum,
                                      nesterov=outer.nesterov)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=120)), min_replica_size=args.learners,
        load_state_dict=lambda state: net.load_state_dict(state["model"]),
        state_dict=lambda: {"model": net.state_dict()}, use_async_quorum=False,
        replica_id=f"replica-{args.index}", store_addr="localhost", store_port=store.port,
        rank=0, world_size=1, lighthouse_addr=args.lighthouse, init_sync=False,
        timeout=timedelta(seconds=120), quorum_timeout=timedelta(seconds=120),
        connect_timeout=timedelta(seconds=60),
    )
    before = eval_loss(net)
    try:
        with DiLoCo(manager, [net], optimizer, outer_optimizer, sync_every=args.inner):
            for index in range(1, args.steps + 1):
                step(net, optimizer, args.index, index)
    finally:
        manager.shutdown(wait=False)
    return {"before": before, "after": eval_loss(net), "weights": _flat(net),
            "commits": manager.current_step()}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["plain", "learner", "torchft"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--inner", type=int, default=5)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--learners", type=int, default=1)
    parser.add_argument("--learner", default="a")
    parser.add_argument("--endpoint")
    parser.add_argument("--keys", help="The learner's CURVE key folder (none: plaintext).")
    parser.add_argument("--mode", default="barrier")
    parser.add_argument("--merge", default="delta")
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--pause-at", type=int, default=0)
    parser.add_argument("--step-delay", type=float, default=0.0)
    parser.add_argument("--lighthouse")
    parser.add_argument("--outer-lr", type=float, default=0.7)
    parser.add_argument("--outer-momentum", type=float, default=0.9)
    return parser


def main() -> None:
    args = _parser().parse_args()
    torch.set_num_threads(1)
    if args.role == "learner" and args.ranks > 1:
        _write(Path(args.out), run_ranks(args))
        return
    run = {"plain": run_plain, "learner": run_learner, "torchft": run_torchft}[args.role]
    _write(Path(args.out), run(args))


if __name__ == "__main__":
    main()
