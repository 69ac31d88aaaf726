"""A Vision Transformer (Dosovitskiy et al. 2021) built from the language model's blocks.

images FloatTensor[batch, channels, height, width] -> logits FloatTensor[batch, num_classes].
Patches of `patch_size` pixels are embedded by one strided convolution, given learned
positions, passed through non-causal `Block`s (RMSNorm, attention, SwiGLU, no rotary
tables) and averaged into a linear head (global average pooling, no class token, as in
Zhai et al. 2022, "Scaling Vision Transformers"). `layers`, `init_weights()`, `num_params()`
and `flops_per_token()` follow the transformer's contract; there is no tensor-parallel plan.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from runtime.models.transformer import build_blocks, init_blocks, swiglu_width


class ViT(nn.Module):
    """Image classifier; `hidden_dim` is the SwiGLU width (default Llama's rule)."""

    def __init__(self, image_size: int = 224, patch_size: int = 14, channels: int = 3,
                 num_classes: int = 1000, dim: int = 384, n_layers: int = 12,
                 n_heads: int = 6, hidden_dim: int | None = None, norm_eps: float = 1e-6) -> None:
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} must divide by patch_size={patch_size}")
        self.n_layers, self.dim = n_layers, dim
        self.num_patches = (image_size // patch_size) ** 2
        self.patch_embed = nn.Conv2d(channels, dim, patch_size, stride=patch_size)
        self.pos_embed = nn.Parameter(torch.empty(1, self.num_patches, dim))
        self.layers = build_blocks(n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_heads,
                                   hidden_dim=hidden_dim or swiglu_width(dim, 8),
                                   norm_eps=norm_eps, causal=False)
        self.norm = nn.RMSNorm(dim, eps=norm_eps)
        self.head = nn.Linear(dim, num_classes)
        self.init_weights()

    def forward(self, images: Tensor) -> Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2) + self.pos_embed
        for block in self.layers.values():
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))

    def init_weights(self) -> None:
        """Re-initialise in place from torch's RNG (deterministic given the seed)."""
        std = 0.02
        self.patch_embed.reset_parameters()
        nn.init.normal_(self.pos_embed, std=std)
        init_blocks(self, std, std / math.sqrt(2 * self.n_layers))
        self.norm.reset_parameters()
        nn.init.zeros_(self.head.weight)  # a zero head starts every class even (Zhai et al.)
        nn.init.zeros_(self.head.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """PaLM's 6N + 12 * L * d * s per patch token, s the patches per image by default.
        N counts every parameter (the patch embedding is a matmul, unlike a lookup)."""
        s = self.num_patches if seq_len is None else seq_len
        return float(6 * self.num_params() + 12 * self.n_layers * self.dim * s)
