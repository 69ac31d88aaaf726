"""The built-in transformer: shapes, causality, GQA, RoPE, meta construction, FLOPs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from runtime.models import MLP, Transformer, ViT
from runtime.models.transformer import Attention, apply_rope, rope_tables

TINY = {"vocab_size": 256, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
        "max_seq_len": 256}


def _tiny(**overrides: object) -> Transformer:
    torch.manual_seed(0)
    return Transformer(**{**TINY, **overrides})  # type: ignore[arg-type]


def test_logits_have_batch_seq_vocab_shape() -> None:
    tokens = torch.randint(0, 256, (3, 17))
    assert _tiny()(tokens).shape == (3, 17, 256)


def test_changing_a_token_changes_no_earlier_logit() -> None:
    model, t = _tiny(), 9
    tokens = torch.randint(0, 256, (2, 20))
    changed = tokens.clone()
    changed[:, t] = (changed[:, t] + 1) % 256
    before, after = model(tokens), model(changed)
    torch.testing.assert_close(before[:, :t], after[:, :t])
    assert not torch.allclose(before[:, t:], after[:, t:])


def test_grouped_query_attention_matches_repeated_key_value_heads() -> None:
    torch.manual_seed(1)
    grouped = Attention(dim=32, n_heads=4, n_kv_heads=2, causal=True)
    full = Attention(dim=32, n_heads=4, n_kv_heads=4, causal=True)
    full.wq, full.wo = grouped.wq, grouped.wo
    for name in ("wk", "wv"):  # each kv head serves two query heads: repeat its rows
        weight = getattr(grouped, name).weight.unflatten(0, (2, 8)).repeat_interleave(2, 0)
        getattr(full, name).weight = nn.Parameter(weight.flatten(0, 1))
    x, rope = torch.randn(2, 6, 32), rope_tables(8, 6, 10000.0)
    torch.testing.assert_close(grouped(x, rope), full(x, rope))


def test_rope_scores_depend_only_on_relative_position() -> None:
    torch.manual_seed(2)
    rope = rope_tables(16, 64, 10000.0)
    q, k = torch.randn(16), torch.randn(16)

    def score(i: int, j: int) -> torch.Tensor:
        at = torch.zeros(1, 64, 1, 16)
        qi, kj = at.clone(), at.clone()
        qi[0, i, 0], kj[0, j, 0] = q, k
        return (apply_rope(qi, rope)[0, i, 0] * apply_rope(kj, rope)[0, j, 0]).sum()

    torch.testing.assert_close(score(10, 3), score(40, 33))
    assert not torch.allclose(score(10, 3), score(10, 4))


def test_meta_build_then_to_empty_and_init_weights_is_deterministic() -> None:
    eager = _tiny()
    with torch.device("meta"):
        model = Transformer(**TINY)  # type: ignore[arg-type]
    model.to_empty(device="cpu")
    for initialised in (eager, model):
        torch.manual_seed(0)
        initialised.init_weights()
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values(),
                            strict=True):
        torch.testing.assert_close(a, b, msg=name)
    torch.testing.assert_close(model.rope_cos, eager.rope_cos)
    tokens = torch.randint(0, 256, (1, 8))
    torch.testing.assert_close(model(tokens), eager(tokens))


def test_flops_follow_palm_six_n_plus_attention() -> None:
    model = _tiny()
    matmul_params = model.num_params() - 256 * 64  # the input embedding is a lookup
    assert model.flops_per_token(128) == 6 * matmul_params + 12 * 2 * 64 * 128
    tied = _tiny(tie_embeddings=True)
    assert tied.num_params() == model.num_params() - 256 * 64
    assert tied.flops_per_token(128) == 6 * tied.num_params() + 12 * 2 * 64 * 128


def test_tied_output_shares_the_embedding() -> None:
    model = _tiny(tie_embeddings=True)
    assert model.output.weight is model.tok_embeddings.weight


def test_a_sequence_longer_than_max_seq_len_is_refused() -> None:
    with pytest.raises(ValueError, match="max_seq_len=256"):
        _tiny()(torch.zeros(1, 257, dtype=torch.long))


def test_vit_classifies_images_with_non_causal_blocks() -> None:
    torch.manual_seed(0)
    model = ViT(image_size=32, patch_size=8, num_classes=10, dim=64, n_layers=2, n_heads=4)
    attentions = [module for module in model.modules() if isinstance(module, Attention)]
    assert len(attentions) == 2
    assert not any(attention.causal for attention in attentions)
    images = torch.randn(2, 3, 32, 32)
    assert model(images).shape == (2, 10)
    # Non-causal: the last patch changes the first patch's features.
    first = model.layers["0"]
    x = torch.randn(1, 16, 64)
    y = x.clone()
    y[0, -1] += 1
    assert not torch.allclose(first(x)[0, 0], first(y)[0, 0])
    assert model.flops_per_token() == 6 * model.num_params() + 12 * 2 * 64 * 16


def test_mlp_exposes_its_blocks_as_layers() -> None:
    model = MLP(input_dim=32, hidden_dim=64, output_dim=8, depth=3)
    assert len(model.layers) == 3
    assert model(torch.randn(5, 32)).shape == (5, 8)
