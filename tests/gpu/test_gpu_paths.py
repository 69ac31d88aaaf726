"""The paths only a GPU exercises, on one GPU: bfloat16 FSDP2 of the transformer over a
world-1 NCCL process group, compiled blocks against eager ones, an NCCL all-reduce, pinned
host staging of DCP's async checkpoints (and the runtime's Checkpointer on CUDA state), and
a 1-GPU `python -m runtime.train` of the demo config.

They skip where torch sees no CUDA device (the CPU machines of `make test`); on a GPU
machine plain `pytest` runs them, and tools/gpu-check.sh runs exactly these.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse
from torch.distributed.tensor import DTensor

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer
from runtime.parallel import build_mesh, mesh_shape, parallelize
from tests.parallel.layouts import TINY, Layout, tiny

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device (and torch built with CUDA)")

REPO = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda", 0)
STEPS, BATCH, SEQ = 30, 8, 64
STEP_LINE = re.compile(r"^step (\d+)/\d+\s+loss ([0-9.]+)", re.MULTILINE)


@pytest.fixture(scope="module")
def nccl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A world-1 NCCL process group for this module, gone afterwards."""
    torch.cuda.set_device(CUDA)
    store = dist.FileStore(str(tmp_path_factory.mktemp("nccl") / "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=CUDA)
    yield
    dist.destroy_process_group()


def _batch() -> Tensor:
    """One batch again and again: its loss must fall, so a broken update shows."""
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, TINY["vocab_size"], (BATCH, SEQ + 1), generator=generator).to(CUDA)


def _sharded(layout: Layout) -> nn.Module:
    """The tiny transformer on the GPU, laid out by the runtime over a world-1 mesh."""
    return parallelize(tiny().to(CUDA), build_mesh(mesh_shape(layout, 1), "cuda"), layout)


def _train(model: nn.Module, steps: int = STEPS) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch, losses = _batch(), []
    for _ in range(steps):
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_bf16_fsdp2_trains_on_one_gpu(nccl: None) -> None:
    model = _sharded(Layout(param_dtype="bfloat16", reduce_dtype="float32"))
    seen: list[torch.dtype] = []
    first = model.get_submodule("layers.0.attention.wq")
    first.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    losses = _train(model)
    assert isinstance(first.weight, DTensor)  # sharded by FSDP2
    assert first.weight.dtype == torch.float32  # the master copy stays float32
    assert seen[0] == torch.bfloat16  # ...while the blocks compute in bfloat16
    assert losses[-1] < 0.5 * losses[0], losses


def test_compiled_blocks_match_eager(nccl: None) -> None:
    eager = _train(_sharded(Layout()), steps=3)
    model = _sharded(Layout(compile=True))
    for block in model.get_submodule("layers").children():
        assert block._compiled_call_impl is not None  # nn.Module.compile took effect
    compiled = _train(model, steps=3)
    # Inductor fuses and reorders float32 reductions: equal up to rounding, not bitwise.
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-4)
    assert compiled[-1] < compiled[0]


def test_nccl_all_reduce(nccl: None) -> None:
    assert dist.get_backend() == "nccl"
    values = torch.arange(4, dtype=torch.float32, device=CUDA)
    dist.all_reduce(values)
    torch.cuda.synchronize()
    assert values.device.type == "cuda"
    assert values.tolist() == [0.0, 1.0, 2.0, 3.0]  # the sum over a world of one


def _state() -> dict[str, Tensor]:
    generator = torch.Generator(device=CUDA).manual_seed(3)
    return {f"layer{i}": torch.randn(256, 256, device=CUDA, generator=generator)
            for i in range(4)}


def test_dcp_async_save_stages_into_pinned_memory(nccl: None, tmp_path: Path) -> None:
    """DCP's own pinned staging (torch 2.13: DefaultStager(StagingOptions(...))): the staged
    copy is pinned host memory, and the checkpoint holds the state as it was when staging
    finished, whatever training does to the tensors afterwards."""
    state, expected = _state(), {k: v.cpu() for k, v in _state().items()}
    stager = DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False,
                                          use_async_staging=True, use_non_blocking_copy=True))
    try:
        staged = stager.stage(state)
        staged = staged.result() if hasattr(staged, "result") else staged
        assert all(t.device.type == "cpu" and t.is_pinned() for t in staged.values())
        # The background write's collectives get a group of their own, as the manager's do.
        response = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(tmp_path),
                                  async_stager=stager, process_group=dist.new_group(
                                      backend="gloo"))
        assert isinstance(response, AsyncSaveResponse)
        response.staging_completion.result()
        for tensor in state.values():
            tensor.add_(1.0)  # the next optimizer step, while the write goes on
        response.upload_completion.result()
    finally:
        stager.close()
    loaded = {k: torch.zeros_like(v) for k, v in expected.items()}
    dcp.load(loaded, storage_reader=dcp.FileSystemReader(tmp_path))
    torch.testing.assert_close(loaded, expected, rtol=0, atol=0)


def test_checkpointer_saves_cuda_state(nccl: None, tmp_path: Path) -> None:
    """The runtime's manager (unpinned host staging) on GPU tensors: committed, loadable."""
    state, expected = _state(), {k: v.clone() for k, v in _state().items()}
    checkpointer = Checkpointer(CheckpointConfig(uri=str(tmp_path), interval_steps=1,
                                                 keep_last=2, async_save=True))
    try:
        checkpointer.save(1, state)
        for tensor in state.values():
            tensor.add_(1.0)
        checkpointer.wait()
        loaded = {k: torch.zeros_like(v) for k, v in state.items()}
        assert checkpointer.load(loaded, "latest") == 1
    finally:
        checkpointer.close()
    torch.testing.assert_close(loaded, expected, rtol=0, atol=0)


@pytest.mark.slow
def test_runtime_train_on_one_gpu(tmp_path: Path) -> None:
    """The demo config on one GPU in bfloat16 (Ray, the data pipeline, telemetry and DCP
    checkpoints as a job runs them); the loss falls."""
    argv = [sys.executable, "-m", "runtime.train", "examples/train/tiny.yaml",
            "run.name=gpu-check", "run.steps=30", "layout.gpus_per_worker=1",
            "layout.backend=nccl", "layout.max_world_size=1", "layout.param_dtype=bfloat16",
            "layout.numa_affinity=false", f"checkpoint.uri={tmp_path / 'checkpoints'}"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    losses = [float(loss) for _, loss in STEP_LINE.findall(done.stdout)]
    assert len(losses) == 3, done.stdout[-3000:]
    assert losses[-1] < losses[0], losses
    assert (tmp_path / "checkpoints").is_dir()
