"""`python -m runtime.data.prepare INPUT... --out DIR --tokenizer byte|bpe [--vocab-size N]`:
tokenize text and JSONL files into token shards (runtime.data.tokens). `gkr data prepare`
is the same command through the gkr CLI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from runtime.data.tokens import prepare
from runtime.errors import RuntimeFailure


@dataclass(frozen=True)
class PrepareRequest:
    """What to tokenize, where to, and with which tokenizer."""

    inputs: tuple[str, ...]
    out: str
    tokenizer: str = "byte"
    vocab_size: int | None = None
    field: str = "text"  # the text of a JSONL line


def run(request: PrepareRequest) -> str:
    """Prepare the shards; the one-line report: tokens, bytes, bytes/token, time."""
    start = time.perf_counter()
    meta = prepare(request.inputs, request.out, request.tokenizer, request.vocab_size,
                   field=request.field)
    seconds = time.perf_counter() - start
    return (f"{request.out}: {meta['tokens']:,} tokens from {meta['source_bytes']:,} bytes "
            f"({meta['documents']:,} documents, {meta['bytes_per_token']:.3f} bytes/token, "
            f"vocab {meta['vocab_size']}, {len(meta['shards'])} shards) in {seconds:.1f} s")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runtime.data.prepare",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="text files, .jsonl files or folders")
    parser.add_argument("--out", required=True, help="the folder to create")
    parser.add_argument("--tokenizer", choices=("byte", "bpe"), default="byte")
    parser.add_argument("--vocab-size", type=int, help="ids of a BPE (trained here)")
    parser.add_argument("--field", default="text", help="the text field of a JSONL line")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    request = PrepareRequest(tuple(args.inputs), args.out, args.tokenizer, args.vocab_size,
                             args.field)
    try:
        print(run(request))
    except RuntimeFailure as error:
        print(f"error: {error}", file=sys.stderr)
        return int(error.category)
    return 0


if __name__ == "__main__":
    sys.exit(main())
