"""TokenWindows from where shards live: the stdlib corpus prepared on first use (once, under
a race), gs:// through a local GCS server, and the loader's exact resume over them."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
from pathlib import Path
from typing import Any

# gcsfs reads this once, at import (see tests/cli/conftest.py): the GCS emulator has no
# zonal buckets, and asking costs a 60 s timeout per bucket.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import fsspec
import pytest
import torch

from runtime.data import tokens
from runtime.data.config import DataConfig
from runtime.data.corpus import python_stdlib
from runtime.data.jsonl import InputError, JsonlText
from runtime.data.loader import DataPipeline
from runtime.data.remote import RemoteInputError
from runtime.data.tokens import TokenWindows, prepare
from tests.cli.test_gcs import BUCKET, emulator  # noqa: F401  (a fixture)

FILES = 6  # of the stdlib corpus: a quick subset


def _race(path: str, start: Any, made: Any) -> None:
    """Count this process's prepares (the real one runs), after both processes are ready."""
    real = tokens.prepare

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        with made.get_lock():
            made.value += 1
        return real(*args, **kwargs)

    tokens.prepare = counted
    start.wait()
    TokenWindows(path, 64, prepare_from="python-stdlib", prepare_max_files=FILES)


def test_the_stdlib_corpus_is_prepared_once_by_racing_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    start, made = ctx.Barrier(2), ctx.Value("i", 0)
    path = str(tmp_path / "stdlib")
    procs = [ctx.Process(target=_race, args=(path, start, made)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert made.value == 1
    windows = TokenWindows(path, 64, prepare_from="python-stdlib", prepare_max_files=FILES)
    sources = python_stdlib()[:FILES]
    assert windows.meta["source_bytes"] == sum(p.stat().st_size for p in sources)
    assert windows.tokenizer().decode(windows[0].tolist()) == sources[0].read_text()[:65]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".stdlib.lock", "stdlib"]


@pytest.fixture
def shards(tmp_path: Path) -> Path:
    folder = tmp_path / "text"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text(f"document {i}: " + "lorem ipsum " * (30 + i))
    prepare([folder], tmp_path / "shards", shard_tokens=300)
    return tmp_path / "shards"


@pytest.mark.slow  # the GCS emulator starts in a few seconds
def test_gs_shards_are_copied_once_and_checked(emulator: str, shards: Path,  # noqa: F811
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GKR_DATA_CACHE", str(tmp_path / "cache"))
    fs = fsspec.filesystem("gs")
    fs.put(f"{shards}/", f"{BUCKET}/tokens/good", recursive=True)
    url = f"gs://{BUCKET}/tokens/good"
    local = TokenWindows(str(shards), 15)
    remote = TokenWindows(url, 15)
    assert [remote[i].tolist() for i in range(len(remote))] == \
        [local[i].tolist() for i in range(len(local))]
    assert remote.folder == tmp_path / "cache" / local.meta["hash"]
    fs.rm(f"{BUCKET}/tokens/good/shard-00000.bin")  # a second use reads the cache only
    assert len(TokenWindows(url, 15)) == len(local)

    fs.put(f"{shards}/", f"{BUCKET}/tokens/bad", recursive=True)
    fs.pipe(f"{BUCKET}/tokens/bad/shard-00001.bin", b"\0" * 600)
    monkeypatch.setenv("GKR_DATA_CACHE", str(tmp_path / "other-cache"))
    with pytest.raises(InputError, match=r"shard-00001\.bin: its sha256 differs"):
        TokenWindows(f"gs://{BUCKET}/tokens/bad", 15)
    assert [p.name for p in (tmp_path / "other-cache").iterdir()] == [
        f".{local.meta['hash']}.lock"]  # nothing half-copied


def test_the_loader_resumes_exactly_over_token_windows(shards: Path) -> None:
    config = DataConfig.model_validate({
        "datasets": [{"name": "text", "_target_": "runtime.data.tokens.TokenWindows",
                      "path": str(shards), "seq_len": 7}],
        "batch_size": 3, "seed": 4, "start_method": "fork", "timeout_s": 60,
    })
    total = 2 * len(TokenWindows(str(shards), 7)) // 3 + 2  # past an epoch's end
    with DataPipeline(config) as pipe:
        reference = [next(pipe) for _ in range(total)]
    cut = random.Random(7).randrange(1, total)
    with DataPipeline(config) as pipe:
        head = [next(pipe) for _ in range(cut)]
        state = pipe.state_dict()
    with DataPipeline(config.model_copy(update={"producers": 1}), state=state) as pipe:
        tail = [next(pipe) for _ in range(total - cut)]
    assert all(torch.equal(a, b) for a, b in zip(head + tail, reference, strict=True))
    assert reference[0].dtype == torch.long and reference[0].shape == (3, 8)


@pytest.mark.slow  # the GCS emulator starts in a few seconds
def test_gs_jsonl_is_read_from_a_local_copy_of_its_version(
        emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("GKR_DATA_CACHE", str(tmp_path / "cache"))
    fs = fsspec.filesystem("gs")
    fs.pipe(f"{BUCKET}/sft/train.jsonl", b'{"text": "ab"}\n{"text": "cd"}\n')
    remote = JsonlText(f"gs://{BUCKET}/sft/train.jsonl", seq_len=4)
    assert [remote[i][:3].tolist() for i in range(2)] == [[97, 98, 256], [99, 100, 256]]
    fs.pipe(f"{BUCKET}/sft/train.jsonl", b'{"text": "xyz"}\n')  # a new version: a new copy
    assert JsonlText(f"gs://{BUCKET}/sft/train.jsonl", seq_len=4)[0][:3].tolist() == \
        [120, 121, 122]
    with pytest.raises(RemoteInputError, match=r"missing\.jsonl: cannot read it"):
        JsonlText(f"gs://{BUCKET}/sft/missing.jsonl", seq_len=4)
