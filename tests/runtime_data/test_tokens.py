"""Token shards: prepare (byte and BPE), meta.json, TokenWindows, JSONL, the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runtime.data.jsonl import IGNORE_INDEX, InputError, JsonlText
from runtime.data.tokenizer import BPETokenizer, ByteTokenizer
from runtime.data.tokens import TokenWindows, prepare

TEXTS = {
    "a.txt": "The quick brown fox jumps over the lazy dog.\n" * 20,
    "b.txt": "Pack my box with five dozen liquor jugs! " * 15,
}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(TEXTS["a.txt"])
    (folder / "sub" / "b.txt").write_text(TEXTS["b.txt"])
    (folder / "c.jsonl").write_text(
        json.dumps({"text": "first line"}) + "\n\n" + json.dumps({"text": "second"}) + "\n")
    return folder


def _stream(windows: TokenWindows) -> list[int]:
    return [int(t) for i in range(len(windows)) for t in windows[i]]


def test_byte_shards_decode_to_the_source_text_in_order(corpus: Path, tmp_path: Path) -> None:
    meta = prepare([corpus], tmp_path / "out")
    expected = [*TEXTS["a.txt"].encode(), 256, *b"first line", 256, *b"second", 256,
                *TEXTS["b.txt"].encode(), 256]  # sorted paths: a.txt, c.jsonl, sub/b.txt
    assert meta["tokens"] == len(expected) and meta["dtype"] == "uint16"
    assert meta["source_bytes"] == len(expected) - 4
    assert meta["bytes_per_token"] == pytest.approx((len(expected) - 4) / len(expected))
    windows = TokenWindows(str(tmp_path / "out"), seq_len=31)
    assert len(windows) == len(expected) // 32
    assert _stream(windows) == expected[: len(windows) * 32]
    assert windows[3].dtype.is_floating_point is False and windows[3].shape == (32,)
    text = ByteTokenizer().decode(windows[0].tolist())
    assert text == TEXTS["a.txt"][:32]


def test_windows_stay_inside_each_of_several_shards(corpus: Path, tmp_path: Path) -> None:
    meta = prepare([corpus], tmp_path / "out", shard_tokens=100)
    assert [s["tokens"] for s in meta["shards"]][:-1] == [100] * (len(meta["shards"]) - 1)
    ids = np.concatenate([np.fromfile(tmp_path / "out" / s["file"], dtype=np.uint16)
                          for s in meta["shards"]])
    windows = TokenWindows(str(tmp_path / "out"), seq_len=9)
    assert len(windows) == sum(s["tokens"] // 10 for s in meta["shards"])
    per_shard = [ids[k * 100 + w * 10: k * 100 + w * 10 + 10].tolist()
                 for k, s in enumerate(meta["shards"]) for w in range(s["tokens"] // 10)]
    assert [windows[i].tolist() for i in range(len(windows))] == per_shard
    with pytest.raises(IndexError):
        windows[len(windows)]


def test_the_meta_hash_is_a_function_of_content(corpus: Path, tmp_path: Path) -> None:
    first = prepare([corpus], tmp_path / "one")
    again = prepare([corpus], tmp_path / "two")
    assert first == again  # no path, time or host in the meta
    (corpus / "a.txt").write_text(TEXTS["a.txt"] + "!")
    assert prepare([corpus], tmp_path / "three")["hash"] != first["hash"]


def test_a_bad_jsonl_line_names_file_and_line_and_writes_nothing(corpus: Path,
                                                                 tmp_path: Path) -> None:
    with (corpus / "c.jsonl").open("a") as extra:
        extra.write('{"text": "fine"}\n{"text": oops}\n')
    with pytest.raises(InputError, match=rf"^{corpus / 'c.jsonl'}:5: not JSON"):
        prepare([corpus], tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # no half-written folder


def test_a_trained_bpe_has_the_vocabulary_asked_and_round_trips(corpus: Path,
                                                                tmp_path: Path) -> None:
    meta = prepare([corpus], tmp_path / "out", tokenizer="bpe", vocab_size=300)
    assert meta["vocab_size"] == 300 and meta["tokenizer"]["path"] == "tokenizer.json"
    assert meta["bytes_per_token"] > 1.5  # merges: fewer tokens than bytes
    windows = TokenWindows(str(tmp_path / "out"), seq_len=15)
    tokenizer = windows.tokenizer()
    assert isinstance(tokenizer, BPETokenizer) and tokenizer.vocab_size == 300
    stream = _stream(windows)
    first_doc = stream[: stream.index(tokenizer.eos_id)]
    assert tokenizer.decode(first_doc) == TEXTS["a.txt"]
    unseen = "Zebras vex: ünïcödé 🙂"
    assert tokenizer.decode(tokenizer.encode(unseen)) == unseen


def test_jsonl_text_reads_lines_directly(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "hi"}\n\n{"text": "a longer line"}\n{"body": "x"}\n')
    data = JsonlText(str(path), seq_len=4)
    assert len(data) == 3
    assert data[0].tolist() == [*b"hi", 256, IGNORE_INDEX, IGNORE_INDEX]
    assert data[1].tolist() == list(b"a lon")
    with pytest.raises(InputError, match=rf"^{path}:4: needs a string field 'text'"):
        data[2]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"})


def test_the_commands_report_and_fail_without_a_traceback(corpus: Path,
                                                          tmp_path: Path) -> None:
    ok = _cli(sys.executable, "-m", "runtime.data.prepare", str(corpus), "--out", "out",
              cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "tokens from" in ok.stdout and "bytes/token" in ok.stdout
    (corpus / "c.jsonl").write_text('{"text": 1}\n')
    gkr = str(Path(sys.executable).with_name("gkr"))
    bad = _cli(gkr, "data", "prepare", str(corpus), "--out", "again", cwd=tmp_path)
    assert bad.returncode == 1
    assert bad.stderr == f"error: {corpus / 'c.jsonl'}:1: needs a string field 'text' " \
                         "(a JSON object per line)\n"
