"""GKR's built-in decoder-only transformer (Llama-style: RMSNorm, rotary embeddings, SwiGLU,
grouped-query attention).

Contract (what the driver and `runtime.parallel` rely on):
* `forward(tokens: LongTensor[batch, seq]) -> FloatTensor[batch, seq, vocab_size]` logits;
  `seq <= max_seq_len`. Attention is causal: logit t depends on tokens 0..t only.
* `layers`: an `nn.ModuleDict` of the repeated `Block`s ("0", "1", ...), the units of FSDP
  sharding and activation checkpointing. Blocks take `(x, rope)`, `rope` the root's tables.
* `init_weights()`: re-initialises every parameter and the rotary tables in place from
  torch's global RNG, so it is deterministic given `torch.manual_seed`, and it works after
  `to_empty()` from the meta device (the tables are recomputed, not loaded: they are
  non-persistent buffers and never appear in a checkpoint).
* `num_params()` counts each parameter once (a tied output shares the embedding's).
* `flops_per_token(seq_len)`: training FLOPs per token, PaLM's formula (Chowdhery et al.
  2022, appendix B; the same one as torchtitan's `get_num_flop_per_token`):
  `6 * N + 12 * n_layers * dim * seq_len`, N the parameters that take part in matmuls (all
  but the input embedding; a tied embedding counts, being the output matmul).
* `apply_tensor_parallel(tp_mesh)`: Megatron-style TP over a 1-D mesh (Shoeybi et al. 2019):
  wq/wk/wv and w1/w3 column-wise, wo and w2 row-wise, the embedding row-wise and the output
  column-wise with logits gathered (replicated), so the loss code sees ordinary tensors.
  `n_heads` and `n_kv_heads` must divide by the TP size, and a tied output is refused.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

Rope = tuple[Tensor, Tensor]  # cos and sin, each [seq, head_dim // 2]


def rope_tables(head_dim: int, max_seq_len: int, theta: float,
                device: torch.device | None = None) -> Rope:
    """Real-valued rotary tables (Su et al. 2021, RoFormer): angle of position p, pair i is
    p * theta^(-2i/head_dim). Real cos/sin rather than complex numbers, which DTensor and
    the meta device do not all support."""
    inverse = theta ** -(torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, device=device).float(), inverse)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, rope: Rope) -> Tensor:
    """Rotate each (even, odd) pair of `x` [batch, seq, heads, head_dim] by its position's
    angle."""
    cos, sin = (table[: x.shape[1]].to(x.dtype)[None, :, None, :] for table in rope)
    even, odd = x.unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2)


class Attention(nn.Module):
    """Multi-head attention with grouped key/value heads (Ainslie et al. 2023, GQA)."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, causal: bool) -> None:
        super().__init__()
        if dim % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"dim={dim} must divide by n_heads={n_heads}, and n_heads by "
                             f"n_kv_heads={n_kv_heads}")
        self.head_dim, self.causal = dim // n_heads, causal
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x: Tensor, rope: Rope | None) -> Tensor:
        # Heads are inferred (-1): under TP each rank holds n_heads / tp of them.
        q, k, v = (w(x).unflatten(-1, (-1, self.head_dim)) for w in (self.wq, self.wk, self.wv))
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                             enable_gqa=self.n_kv_heads != self.n_heads)
        return self.wo(out.transpose(1, 2).flatten(-2))


class FeedForward(nn.Module):
    """SwiGLU (Shazeer 2020): w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """One pre-norm residual block: attention then SwiGLU, each behind an RMSNorm."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, hidden_dim: int,
                 norm_eps: float, causal: bool = True) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.attention = Attention(dim, n_heads, n_kv_heads, causal)
        self.ffn_norm = nn.RMSNorm(dim, eps=norm_eps)
        self.feed_forward = FeedForward(dim, hidden_dim)

    def forward(self, x: Tensor, rope: Rope | None = None) -> Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))

    def init_weights(self, std: float, residual_std: float) -> None:
        """Normal inputs projections; the two projections back into the residual stream
        smaller (`residual_std`, GPT-2's 1/sqrt(2 * n_layers) scaling, Radford et al. 2019)."""
        for linear in (self.attention.wq, self.attention.wk, self.attention.wv,
                       self.feed_forward.w1, self.feed_forward.w3):
            nn.init.normal_(linear.weight, std=std)
        for linear in (self.attention.wo, self.feed_forward.w2):
            nn.init.normal_(linear.weight, std=residual_std)
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()


def init_blocks(model: nn.Module, std: float, residual_std: float) -> None:
    """Every `Block` of `model`, found through any wrapper (activation checkpointing)."""
    for module in model.modules():
        if isinstance(module, Block):
            module.init_weights(std, residual_std)


def swiglu_width(dim: int, multiple_of: int) -> int:
    """Llama's SwiGLU width: 2/3 of 4 * dim (so three matrices cost what a 4x MLP's two do),
    rounded up to a multiple of `multiple_of` (Touvron et al. 2023)."""
    hidden = int(2 * 4 * dim / 3)
    return multiple_of * math.ceil(hidden / multiple_of)


def build_blocks(n_layers: int, dim: int, n_heads: int, n_kv_heads: int, hidden_dim: int,
                 norm_eps: float, causal: bool = True) -> nn.ModuleDict:
    """`n_layers` blocks keyed "0", "1", ... (a dict keeps their names when one is removed,
    e.g. by pipeline stages, so checkpoint keys stay stable)."""
    return nn.ModuleDict({str(i): Block(dim, n_heads, n_kv_heads, hidden_dim, norm_eps, causal)
                          for i in range(n_layers)})


class Transformer(nn.Module):
    """Decoder-only language model; see the module docstring for the contract."""

    rope_cos: Tensor
    rope_sin: Tensor

    def __init__(self, vocab_size: int, dim: int, n_layers: int, n_heads: int,
                 n_kv_heads: int | None = None, hidden_dim: int | None = None,
                 multiple_of: int = 256, max_seq_len: int = 2048, rope_theta: float = 10000.0,
                 norm_eps: float = 1e-5, tie_embeddings: bool = False) -> None:
        super().__init__()
        self.n_layers, self.dim, self.max_seq_len = n_layers, dim, max_seq_len
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.rope_theta, self.tie_embeddings = rope_theta, tie_embeddings
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = build_blocks(n_layers, dim=dim, n_heads=n_heads,
                                   n_kv_heads=self.n_kv_heads, norm_eps=norm_eps,
                                   hidden_dim=hidden_dim or swiglu_width(dim, multiple_of))
        self.norm = nn.RMSNorm(dim, eps=norm_eps)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        if tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(dim // n_heads, max_seq_len, rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    def forward(self, tokens: Tensor) -> Tensor:
        if tokens.shape[1] > self.max_seq_len:
            raise ValueError(f"sequence of {tokens.shape[1]} tokens is longer than the model's "
                             f"max_seq_len={self.max_seq_len}")
        x = self.tok_embeddings(tokens)
        rope = (self.rope_cos, self.rope_sin)
        for block in self.layers.values():
            x = block(x, rope)
        return self.output(self.norm(x))

    def init_weights(self) -> None:
        """Re-initialise in place from torch's RNG (deterministic given the seed)."""
        cos, sin = rope_tables(self.dim // self.n_heads, self.max_seq_len, self.rope_theta,
                               device=self.rope_cos.device)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)
        std = 0.02  # GPT-2's and Megatron's initialisation scale
        nn.init.normal_(self.tok_embeddings.weight, std=std)
        init_blocks(self, std, std / math.sqrt(2 * self.n_layers))
        self.norm.reset_parameters()
        if not self.tie_embeddings:
            nn.init.normal_(self.output.weight, std=self.dim ** -0.5)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """PaLM appendix B: 6N + 12 * L * d * s (see the module docstring for N)."""
        embedding = 0 if self.tie_embeddings else self.tok_embeddings.weight.numel()
        n = self.num_params() - embedding
        return float(6 * n + 12 * self.n_layers * self.dim * seq_len)

    def apply_tensor_parallel(self, tp_mesh: DeviceMesh) -> None:
        """Shard in place over `tp_mesh` (1-D); see the module docstring for the plan."""
        tp = tp_mesh.size()
        if self.n_heads % tp or self.n_kv_heads % tp:
            raise ValueError(f"layout.tp={tp} must divide the model's n_heads={self.n_heads} "
                             f"and n_kv_heads={self.n_kv_heads}")
        if self.tie_embeddings:
            raise ValueError(f"layout.tp={tp}: a tied output (tie_embeddings: true) cannot be "
                             "tensor-parallel here; untie it or use layout.tp=1")
        parallelize_module(self, tp_mesh, {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate()),
            "output": ColwiseParallel(output_layouts=Replicate()),
        })
        for block in self.layers.values():
            parallelize_module(block, tp_mesh, _BLOCK_PLAN)


# Megatron's pairing: a column-wise layer's shards feed the row-wise one after it without
# communication; the row-wise output is summed across ranks (one all-reduce per pair).
_BLOCK_PLAN: dict[str, ParallelStyle] = {
    "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
    "attention.wv": ColwiseParallel(), "attention.wo": RowwiseParallel(),
    "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
    "feed_forward.w2": RowwiseParallel(),
}
