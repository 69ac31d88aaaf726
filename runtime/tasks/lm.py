"""Causal language modelling.

Contract: the model maps token ids LongTensor[batch, seq] to logits FloatTensor[batch, seq,
vocab]. A batch is LongTensor[batch, seq + 1]: inputs are its first seq columns, labels the
next token of each; label -100 (padding of a short JSONL document) counts in no loss.
The loss is the mean cross-entropy in nats per token; with the data's bytes per token it is
also bits per byte, which compares models with different tokenizers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from runtime.tasks.base import StepLoss, TaskContext, contract_error, meta_output, shape_of

IGNORE = -100  # F.cross_entropy's default ignore_index


class LanguageModelling:
    """Next-token prediction; `vocab_size`: the tokenizer's, which the logits must cover."""

    unit, loss_unit = "tokens", "nats/token"

    def __init__(self, vocab_size: int | None = None, bytes_per_token: float | None = None,
                 check_seq_len: int = 16) -> None:
        self.vocab_size, self.bytes_per_token = vocab_size, bytes_per_token
        self.check_seq_len = check_seq_len

    def check(self, model: nn.Module) -> None:
        tokens = torch.zeros(2, self.check_seq_len, dtype=torch.long)
        logits = meta_output(model, tokens)
        expected = f"logits [2, {self.check_seq_len}, vocab] for token ids [2, " \
                   f"{self.check_seq_len}]"
        if not isinstance(logits, torch.Tensor) or logits.dim() != 3 or \
                tuple(logits.shape[:2]) != (2, self.check_seq_len):
            raise contract_error(expected, shape_of(logits))
        if not logits.dtype.is_floating_point:
            raise contract_error("floating-point logits", str(logits.dtype))
        if self.vocab_size is not None and logits.shape[-1] < self.vocab_size:
            raise contract_error(f"a vocab of at least the tokenizer's {self.vocab_size}",
                                f"{logits.shape[-1]} logits per token")

    def start(self, context: TaskContext) -> None:
        """Take the data's bytes per token unless the config gave one."""
        if self.bytes_per_token is None:
            self.bytes_per_token = context.bytes_per_token

    def loss(self, model: nn.Module, batch: torch.Tensor) -> StepLoss:
        inputs, labels = batch[:, :-1].clamp_min(0), batch[:, 1:]
        logits = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(),
                               ignore_index=IGNORE)
        return StepLoss(loss, int((labels != IGNORE).sum()))

    def metrics(self, loss: float) -> dict[str, float]:
        """Bits per byte, when the data says how many bytes a token is."""
        if not self.bytes_per_token:
            return {}
        return {"bits/byte": loss / math.log(2) / self.bytes_per_token}

    def close(self) -> None:
        """Nothing to release."""
