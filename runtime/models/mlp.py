"""The small network of local runs and smoke tests: `depth` Linear+GELU blocks and a head.

`layers` holds the blocks (FSDP units); the model has no tensor-parallel plan, so a layout
with tp > 1 is refused for it.
"""

from __future__ import annotations

from itertools import pairwise

from torch import Tensor, nn


class MLP(nn.Module):
    """`depth` hidden layers of `hidden_dim` with GELU, then a linear head to `output_dim`."""

    def __init__(self, input_dim: int = 32, hidden_dim: int = 64, output_dim: int = 8,
                 depth: int = 2) -> None:
        super().__init__()
        widths = [input_dim] + [hidden_dim] * depth
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(a, b), nn.GELU()) for a, b in pairwise(widths))
        self.head = nn.Linear(widths[-1], output_dim)

    def forward(self, x: Tensor) -> Tensor:
        for block in self.layers:
            x = block(x)
        return self.head(x)

    def init_weights(self) -> None:
        """torch's default initialisation again (deterministic given the seed)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int = 1) -> float:
        """6N per sample: forward 2N, backward 4N (Kaplan et al. 2020); no attention."""
        return float(6 * self.num_params())
