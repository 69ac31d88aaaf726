"""Building the model on the meta device and giving it memory once laid out
(runtime.parallel.layout.materialize; layout.meta_init), so no rank holds the whole model."""

from __future__ import annotations

import pytest
import torch

from runtime.errors import ConfigError
from runtime.models.transformer import Transformer
from runtime.parallel.layout import lay_out, on_meta
from runtime.run.config import build_config
from runtime.train.check import check_run, meta_init

TINY = {"vocab_size": 257, "dim": 32, "n_layers": 2, "n_heads": 4, "max_seq_len": 16}
DATA = {"datasets": [{"name": "t", "_target_": "runtime.data.synthetic.SyntheticTokens",
                      "seq_len": 8, "vocab": 257}], "batch_size": 2}


class Plain(torch.nn.Module):
    """A model without init_weights."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


PLAIN = {"_target_": f"{__name__}.Plain"}


def test_a_meta_built_model_gets_the_weights_its_init_weights_draws() -> None:
    eager = Transformer(**TINY)
    torch.manual_seed(3)
    eager.init_weights()
    torch.manual_seed(3)
    with torch.device("meta"):
        built = Transformer(**TINY)
    assert on_meta(built)
    laid = lay_out(built, build_config({}).layout, torch.device("cpu"))  # one process
    assert not on_meta(laid)
    for (name, mine), (_, theirs) in zip(laid.state_dict().items(),
                                         eager.state_dict().items(), strict=True):
        assert torch.equal(mine, theirs), name


def test_meta_init_is_on_gpus_for_models_that_can_initialise_themselves() -> None:
    model = {"_target_": "runtime.models.transformer.Transformer", **TINY}
    assert meta_init(build_config({"model": model, "layout": {"gpus_per_worker": 1}}))
    assert not meta_init(build_config({"model": model, "layout": {"gpus_per_worker": 0}}))
    assert not meta_init(build_config({"model": PLAIN, "layout": {"gpus_per_worker": 1}}))


def test_meta_init_of_a_model_without_init_weights_is_refused_before_any_rank() -> None:
    task = {"_target_": "runtime.tasks.distill.Distillation"}
    config = build_config({"model": PLAIN, "task": task, "data": DATA,
                           "layout": {"meta_init": True}})
    with pytest.raises(ConfigError, match="init_weights") as raised:
        check_run(config)
    assert raised.value.field == "layout.meta_init"
