"""`gkr data prepare`: tokenize text into token shards (runtime.data.prepare)."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli._app import app, out_console

data_app = typer.Typer(help="Training data: token shards.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command()
def prepare(
    inputs: Annotated[list[str], typer.Argument(help="Text files, .jsonl files or folders.")],
    out: Annotated[str, typer.Option("--out", help="The folder to create.")],
    tokenizer: Annotated[str, typer.Option(help="byte or bpe (trained here).")] = "byte",
    vocab_size: Annotated[int | None, typer.Option(help="Ids of a BPE.")] = None,
    field: Annotated[str, typer.Option(help="The text field of a JSONL line.")] = "text",
) -> None:
    """Tokenize INPUTS in a fixed order into memory-mappable shards and meta.json at --out
    (written whole or not at all); prints tokens, bytes, bytes/token and the time taken."""
    from runtime.data.prepare import PrepareRequest, run

    out_console.print(run(PrepareRequest(tuple(inputs), out, tokenizer, vocab_size, field)))
