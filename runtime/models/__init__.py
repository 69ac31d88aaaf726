"""Built-in models, each named by `_target_` in a config's `model` section.

The contract every model offers the driver (forward, `layers`, `init_weights`,
`apply_tensor_parallel`, `flops_per_token`) is described in `runtime.models.transformer`.
"""

from runtime.models.mlp import MLP
from runtime.models.transformer import Transformer
from runtime.models.vit import ViT

__all__ = ["MLP", "Transformer", "ViT"]
