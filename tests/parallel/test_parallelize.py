"""Layouts train the tiny transformer as one process does: FSDP2, replication, HSDP, TP and
FSDP with TP, on real gloo ranks; bfloat16 parameters come close; activation checkpointing
and compiled blocks change no gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runtime.parallel import parallelize
from tests.parallel.layouts import Layout, probe, run_ranks, tiny, train

TWO = {"fsdp": Layout(), "replicate": Layout(dp_replicate=2, dp_shard=1),
       "tp": Layout(dp_shard=1, tp=2),
       "bf16": Layout(param_dtype="bfloat16", reduce_dtype="float32")}
FOUR = {"hsdp": Layout(dp_replicate=2, dp_shard=2), "fsdp_tp": Layout(dp_shard=2, tp=2)}


def _close(actual: object, expected: object) -> None:
    """Equal up to float32 rounding: the order of reductions differs between layouts."""
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def reference() -> dict[str, object]:
    model = tiny()
    with torch.no_grad():
        logits = model(probe())
    return {"logits": logits, "losses": train(model, None)}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return run_ranks(2, TWO, tmp_path_factory.mktemp("two"))


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return run_ranks(4, FOUR, tmp_path_factory.mktemp("four"))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["fsdp", "replicate", "tp"])
def test_two_ranks_train_as_one_process(layout: str, two_ranks: dict, reference: dict) -> None:
    _close(two_ranks[layout]["logits"], reference["logits"])
    _close(two_ranks[layout]["losses"], reference["losses"])
    assert reference["losses"][-1] < reference["losses"][0]  # it learns: the test can fail


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["hsdp", "fsdp_tp"])
def test_four_ranks_train_as_one_process(layout: str, four_ranks: dict,
                                         reference: dict) -> None:
    _close(four_ranks[layout]["logits"], reference["logits"])
    _close(four_ranks[layout]["losses"], reference["losses"])


@pytest.mark.slow
def test_bfloat16_parameters_train_close_to_float32(two_ranks: dict, reference: dict) -> None:
    bf16 = two_ranks["bf16"]
    assert bf16["logits"].dtype == torch.float32  # the root hands float32 logits to the loss
    torch.testing.assert_close(bf16["losses"], reference["losses"], rtol=2e-2, atol=0)
    assert bf16["losses"] != two_ranks["fsdp"]["losses"]  # it did compute in bfloat16


def _gradients(layout: Layout) -> dict[str, torch.Tensor]:
    """One process's gradients of the probe's loss, keyed by the unwrapped parameter names."""
    tokens = probe()
    model = parallelize(tiny(), None, layout)
    F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    return {name.replace("._checkpoint_wrapped_module", ""): p.grad
            for name, p in model.named_parameters() if p.grad is not None}


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    plain, checkpointed = _gradients(Layout()), _gradients(Layout(activation_checkpointing="full"))
    assert len(plain) == len(list(tiny().parameters()))
    torch.testing.assert_close(checkpointed, plain)


@pytest.mark.slow  # inductor compiles C++ with gcc: over a minute on two busy cores
def test_compiled_blocks_give_the_same_gradients() -> None:
    torch.testing.assert_close(_gradients(Layout(compile=True)), _gradients(Layout()),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_tensor_parallel_refuses_heads_it_does_not_divide(two_ranks: dict) -> None:
    field, message = two_ranks["refused"]
    assert field == "layout.tp"
    assert message == "layout.tp=2 must divide the model's n_heads=4 and n_kv_heads=1"
