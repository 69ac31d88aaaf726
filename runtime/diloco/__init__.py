"""Cross-region DiLoCo (seed §6): learners that train on their own for H steps, and one
synchroniser that merges their weights with an outer optimizer.

`runtime.diloco.learner` is the training loop's hook; `runtime.diloco.synchroniser` the
synchroniser (`python -m runtime.diloco`); `runtime.diloco.config` the settings of both.
"""

from runtime.diloco.config import DilocoConfig, OuterOptimizer, SynchroniserConfig
from runtime.diloco.errors import DilocoError

__all__ = ["DilocoConfig", "DilocoError", "OuterOptimizer", "SynchroniserConfig"]
