"""Tokenizers that need no download: bytes, and a byte-level BPE trained at prepare time.

Both follow `Tokenizer`: `vocab_size`, `eos_id`, `encode(text) -> list[int]`,
`decode(ids) -> str`, and `spec()`, the component section (`{_target_, ...}`) that builds
the same tokenizer again (what meta.json records beside the token shards).

- `ByteTokenizer`: ids 0..255 are the UTF-8 bytes of the text, 256 ends a document;
  vocab 257. Nothing to train or store.
- `BPETokenizer(path=tokenizer.json)`: a Hugging Face `tokenizers` byte-level BPE
  (`train_bpe` makes one). Byte-level pre-tokenization maps every byte to a symbol first
  (tokenizers' `pre_tokenizers.ByteLevel`, GPT-2's scheme), so any text round-trips and no
  unknown token exists; `<|endoftext|>` is the end-of-document id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from runtime.components import Component, instantiate
from runtime.data.remote import fetch_file, is_remote
from runtime.errors import ConfigError

EOS_TOKEN = "<|endoftext|>"
BYTE_VOCAB = 257
# The BPE's base alphabet: one symbol per byte, plus the end-of-document token.
BPE_MIN_VOCAB = 256 + 1


class Tokenizer(Protocol):
    """What the token shards and the text datasets need of a tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_id(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def spec(self) -> dict[str, Any]:
        """The component section that builds this tokenizer again."""
        ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, end of document 256 (vocab 257)."""

    vocab_size = BYTE_VOCAB
    eos_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        # A window may cut a multi-byte character: its bytes decode as U+FFFD.
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def spec(self) -> dict[str, Any]:
        return {"_target_": f"{__name__}.ByteTokenizer"}


class BPETokenizer:
    """A byte-level BPE saved as a `tokenizers` tokenizer.json (a local path, or gs://)."""

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.path = fetch_file(str(path)) if is_remote(path) else Path(path)
        try:
            self._tok = HFTokenizer.from_file(str(self.path))
        except Exception as exc:  # tokenizers raises its own Exception for bad files
            raise ConfigError("tokenizer.path", f"{self.path}: not a tokenizer.json "
                                                f"({exc})") from exc
        eos = self._tok.token_to_id(EOS_TOKEN)
        if eos is None:
            raise ConfigError("tokenizer.path", f"{self.path}: has no {EOS_TOKEN} token")
        self._eos = int(eos)

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    @property
    def eos_id(self) -> int:
        return self._eos

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many documents at once (tokenizers encodes them on all cores)."""
        return [list(e.ids) for e in self._tok.encode_batch(texts)]

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))

    def spec(self) -> dict[str, Any]:
        return {"_target_": f"{__name__}.BPETokenizer", "path": self.path.name}


def train_bpe(texts: Iterable[str], vocab_size: int, path: Path) -> BPETokenizer:
    """Train a byte-level BPE of `vocab_size` ids on `texts` and save it at `path`."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if vocab_size < BPE_MIN_VOCAB + 1:
        raise ValueError(f"vocab_size: got {vocab_size}; a byte-level BPE needs more than "
                         f"{BPE_MIN_VOCAB} (256 bytes and {EOS_TOKEN})")
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(path))
    return BPETokenizer(path)


def load_tokenizer(spec: dict[str, Any] | str, base: Path | None = None,
                   field: str = "tokenizer") -> Tokenizer:
    """A tokenizer from a component section, `"byte"`, or a tokenizer.json path; relative
    paths are read from `base` (the shards' folder, where meta.json names them)."""
    if spec == "byte":
        return ByteTokenizer()
    if isinstance(spec, str):
        spec = {"_target_": f"{__name__}.BPETokenizer", "path": spec}
    component = Component.model_validate(spec)
    path = component.kwargs.get("path")
    if base is not None and isinstance(path, str) and not Path(path).is_absolute():
        component = Component.model_validate({**spec, "path": str(base / path)})
    built: Tokenizer = instantiate(component, field)
    return built
