"""The training driver on the built-in transformer and on real text (20 files of the Python
standard library, bytes): real Ray Train ranks on gloo, FSDP2 and HSDP, DCP checkpoints
resumed on another layout, gradient accumulation, clipping, the LR schedule; a model class
of the researcher's own through `gkr run --local`; and the errors that stop a wrong model
before any rank starts."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
import ray
import ray.train.torch
import torch
import torch.distributed.checkpoint as dcp

from runtime.data.tokens import TokenWindows
from runtime.errors import ConfigError
from runtime.models.transformer import Transformer
from runtime.run.batches import BatchSource
from runtime.run.config import TrainConfig
from runtime.tasks.lm import LanguageModelling
from runtime.train.check import check_run
from runtime.train.compose import load_config
from runtime.train.driver import TrainResult, run_training
from runtime.train.step import Stepper

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples/train/tiny.yaml"
GKR = [sys.executable, "-c", "from generator.cli import main; main()"]
STEPS, RESUME_AT, SEQ, FILES = 16, 8, 64, 20
# A uniform guess over the 257 byte ids costs ln(257) = 5.55 nats/token; the tiny model
# starts at 5.8. Measured on this corpus (one process, the same settings): the mean of
# steps 13-16 is 2.9 (a bigram's worth of Python); 60% of ln(257) = 3.33 leaves a margin
# for the loader's own sample order.
LEARNT = 0.6 * math.log(257)
# HSDP on 4 ranks (or 2 micro-batches) averages the same 16 windows per step as FSDP on 2,
# in another order of float32 sums (means of 4 windows, then reduce-scatter + all-reduce).
# Measured: at most 4.8e-7 nats/token apart over 8 resumed (4 accumulated) steps; float32's
# rounding of a loss near 3 is 2.4e-7. 1e-5 leaves 20x that, far below any real divergence
# (a step's own change of the loss is > 1e-2).
SAME_RUN = 1e-5


TRANSFORMER = ["model=transformer_tiny", "model.vocab_size=257", f"model.max_seq_len={SEQ}"]


def _overrides(corpus: Path) -> list[str]:
    """tiny.yaml on 64-token windows of the corpus, 16 windows per step in all, a fixed
    schedule (warm-up 2, cosine over 16 steps); TRANSFORMER makes it the tests' transformer
    (156k parameters)."""
    return [
        f"data.datasets.0.path={corpus}", f"data.datasets.0.seq_len={SEQ}",
        f"+data.datasets.0.prepare_max_files={FILES}", f"run.steps={STEPS}", "run.log_every=1",
        "optim.lr=0.003", "lr_schedule.warmup_steps=2", f"lr_schedule.decay_steps={STEPS}",
        "telemetry.enabled=false", "logging.fleet_every_steps=0",
        "logging.forward_worker_logs=false", "layout.numa_affinity=false",
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus prepared once (the ranks find it ready)."""
    folder = tmp_path_factory.mktemp("corpus") / "stdlib-byte"
    TokenWindows(str(folder), SEQ, prepare_from="python-stdlib", prepare_max_files=FILES)
    return folder


def _train(corpus: Path, *overrides: str) -> TrainResult:
    return run_training(load_config(TINY, [*TRANSFORMER, *_overrides(corpus), *overrides]),
                        echo=lambda line: None)


@dataclass(frozen=True)
class Runs:
    """The reference run (2 ranks, FSDP2, checkpoints at 8 and 16) and where it saved."""

    reference: TrainResult
    checkpoints: Path


@pytest.fixture(scope="module")
def two_ranks(local_ray: None, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    uri = tmp_path_factory.mktemp("fsdp") / "ckpt"
    result = _train(corpus, "layout.max_world_size=2", "data.batch_size=8",
                    f"checkpoint.uri={uri}", f"checkpoint.interval_steps={RESUME_AT}")
    assert result.plan.world_size == 2 and sorted(result.losses) == list(range(1, STEPS + 1))
    return Runs(result, uri)


def _step_dir(uri: Path, step: int) -> Path:
    return uri / f"step-{step:010d}"


def _schedule_steps(step_dir: Path) -> int:
    """How many times the checkpointed LR schedule was stepped."""
    state = {"train": {"schedule": {"last_epoch": -1}}}
    dcp.load(state, checkpoint_id=str(step_dir))
    return int(state["train"]["schedule"]["last_epoch"])


@pytest.mark.slow
def test_the_transformer_learns_the_stdlib_under_fsdp2(two_ranks: Runs) -> None:
    losses = two_ranks.reference.losses
    assert losses[1] > math.log(257)  # it starts from a guess
    last = [losses[step] for step in range(STEPS - 3, STEPS + 1)]
    assert sum(last) / len(last) < LEARNT, losses


@pytest.mark.slow
def test_a_checkpoint_resumes_exactly_on_four_ranks_as_hsdp(
    two_ranks: Runs, corpus: Path, tmp_path: Path
) -> None:
    start = _step_dir(two_ranks.checkpoints, RESUME_AT)
    assert _schedule_steps(start) == RESUME_AT  # once per committed step
    resumed = _train(corpus, "layout.max_world_size=4", "layout.dp_replicate=2",
                     "layout.dp_shard=2", "data.batch_size=4",  # 16 windows a step, as before
                     f"checkpoint.uri={tmp_path}", f"+checkpoint.resume_from={start}",
                     f"checkpoint.interval_steps={STEPS}")
    assert resumed.plan.world_size == 4
    assert resumed.resumed is not None and resumed.resumed.step == RESUME_AT
    assert sorted(resumed.losses) == list(range(RESUME_AT + 1, STEPS + 1))
    reference = two_ranks.reference.losses
    for step, loss in resumed.losses.items():
        assert loss == pytest.approx(reference[step], abs=SAME_RUN), (step, resumed.losses)
    assert _schedule_steps(_step_dir(tmp_path, STEPS)) == STEPS  # the resumed schedule


@pytest.mark.slow
def test_two_accumulated_micro_batches_equal_the_doubled_batch(
    two_ranks: Runs, corpus: Path
) -> None:
    # 2 ranks x 2 micro-batches of 4 windows draw the 16 windows a step of 8 per rank draws.
    accumulated = _train(corpus, "layout.max_world_size=2", "data.batch_size=4",
                         "step.grad_accum=2", "run.steps=4", f"lr_schedule.decay_steps={STEPS}",
                         "checkpoint=null")
    reference = two_ranks.reference.losses
    assert sorted(accumulated.losses) == [1, 2, 3, 4]
    for step, loss in accumulated.losses.items():
        assert loss == pytest.approx(reference[step], abs=SAME_RUN), (step, accumulated.losses)


MY_MODEL = '''\
import torch
from torch import nn


class MyLM(nn.Module):
    """A researcher's own language model: embeddings, one GRU, a head."""

    def __init__(self, vocab_size: int, max_seq_len: int, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(tokens))[0])


class Pooled(MyLM):
    """Breaks the contract: one row of logits per sequence, [batch, vocab]."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return super().forward(tokens).mean(dim=1)
'''


def _own_model(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mymod.py").write_text(MY_MODEL)
    return folder


def _gkr_here(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gkr run --local` run from `folder`, which is importable to the driver and the ranks."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*GKR, "run", "--local", str(TINY), *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=540)


SWAPPED = ["~model", "+model._target_=mymod.MyLM", "+model.vocab_size=257"]


@pytest.mark.slow
def test_a_model_class_of_your_own_trains_through_gkr_run_local(
    corpus: Path, tmp_path: Path
) -> None:
    done = _gkr_here(_own_model(tmp_path), *_overrides(corpus), *SWAPPED, "run.steps=4",
                     "run.log_every=2", "data.batch_size=4", "checkpoint=null")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "model mymod.MyLM: 0.0M parameters" in done.stdout
    assert "mesh 1 replicate x 2 shard x 1 tensor = 2 ranks: FSDP" in done.stdout
    assert "step 4/4  loss " in done.stdout, done.stdout


def test_a_wrong_model_fails_in_gkr_run_local_before_any_rank(
    corpus: Path, tmp_path: Path
) -> None:
    done = _gkr_here(_own_model(tmp_path), *_overrides(corpus), "~model",
                     "+model._target_=mymod.Pooled", "+model.vocab_size=257")
    assert done.returncode == 1
    assert "error: " in done.stderr and "model._target_: does not meet the task's contract: " \
        "expected logits [2, 16, vocab] for token ids [2, 16], got [2, 257]" in done.stderr
    assert "capacity plan" not in done.stdout  # Ray never started
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("overrides", "field", "says"), [
    (["model._target_=mymod.Nope"], "model._target_", "cannot import 'mymod.Nope'"),
    (["+model.widht=3"], "model.widht", "not an argument of runtime.models.transformer."
                                        "Transformer; accepted: vocab_size, dim, "),
    (["~model", "+model._target_=mymod.Pooled", "+model.vocab_size=257"], "model._target_",
     "does not meet the task's contract"),
    (["model.vocab_size=200", "task.vocab_size=257"], "model._target_",
     "a vocab of at least the tokenizer's 257"),
    (["layout.tp=2", *SWAPPED], "layout.tp",
     "mymod.MyLM has no tensor-parallel plan"),
])
def test_a_wrong_model_is_an_error_naming_the_field(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: list[str],
    field: str, says: str,
) -> None:
    monkeypatch.syspath_prepend(str(_own_model(tmp_path)))
    config = load_config(TINY, [*_overrides(corpus), *overrides])  # the model: transformer_small
    with pytest.raises(ConfigError) as caught:
        check_run(config, world_size=2)
    assert caught.value.field == field
    assert says in caught.value.message


# The Stepper alone, in this process: one rank, no process group, the tiny transformer.

def _stepper(monkeypatch: pytest.MonkeyPatch, model: torch.nn.Module, batches: list[torch.Tensor],
             **step: object) -> Stepper:
    """A Stepper taking plain SGD (lr 1: a step moves the weights by the gradient) over
    `batches`; outside Ray Train the loop's device is this CPU."""
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cpu"))
    overrides = [f"step.{key}={value}" for key, value in step.items()]
    config: TrainConfig = load_config(TINY, overrides)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    stream = cast("BatchSource", iter(batches))  # Stepper only draws from it
    return Stepper(config, model, optimizer, LanguageModelling(257), stream, None)


def _moved(monkeypatch: pytest.MonkeyPatch, batches: list[torch.Tensor],
           **step: object) -> torch.Tensor:
    """How far one step moves the tiny transformer's weights (from seed 0), flattened."""
    torch.manual_seed(0)
    model = Transformer(vocab_size=257, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
                        max_seq_len=SEQ)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    _stepper(monkeypatch, model, batches, **step)()
    return torch.cat([p.detach().flatten() for p in model.parameters()]) - before


def _windows(n: int) -> torch.Tensor:
    return torch.randint(257, (n, SEQ + 1), generator=torch.Generator().manual_seed(1))


def test_clipping_bounds_the_step_to_the_clip_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    free = _moved(monkeypatch, [_windows(4)], clip_grad_norm="null")
    clipped = _moved(monkeypatch, [_windows(4)], clip_grad_norm=0.01)
    assert free.norm() > 0.1  # unclipped, the gradient is far larger
    assert clipped.norm() == pytest.approx(0.01, rel=1e-4)
    assert torch.allclose(clipped / clipped.norm(), free / free.norm(), atol=1e-5)


def test_accumulated_micro_batches_give_the_gradient_of_their_union(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    union = _windows(8)
    whole = _moved(monkeypatch, [union], grad_accum=1)
    halves = _moved(monkeypatch, [union[:4], union[4:]], grad_accum=2)
    assert torch.allclose(halves, whole, atol=1e-6)
