"""`gs://` checkpoints and code stores work out of the box (gcsfs is a dependency), checked
against a local GCS server (`gcp-storage-emulator`, started here on loopback)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
import torch

from generator.cluster.package import FsspecStore
from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer
from runtime.checkpoint.storage import CheckpointStore

BUCKET = "gkr-test"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_until_up(url: str, server: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the GCS emulator exited with {server.returncode}")
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the GCS emulator did not answer at {url} in {limit_s} s")


@pytest.fixture(scope="module")
def emulator() -> Iterator[str]:
    """A GCS server on loopback with one bucket; gcsfs talks to it anonymously."""
    program = shutil.which("gcp-storage-emulator", path=str(Path(sys.executable).parent))
    assert program, "gcp-storage-emulator is in the dev extra: pip install -e '.[dev]'"
    port = _free_port()
    server = subprocess.Popen([program, "start", "--host=127.0.0.1", f"--port={port}",
                               "--in-memory"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    saved = dict(fsspec.config.conf.get("gcs", {})), os.environ.get("STORAGE_EMULATOR_HOST")
    try:
        _wait_until_up(url, server)
        os.environ["STORAGE_EMULATOR_HOST"] = url
        fsspec.config.conf["gcs"] = {"token": "anon"}
        fsspec.filesystem("gs", skip_instance_cache=True).mkdir(BUCKET)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        fsspec.config.conf["gcs"] = saved[0]
        if saved[1] is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved[1]


@pytest.fixture
def no_retry_on_501(monkeypatch) -> None:
    """The emulator answers 501 to `objects.moveTo`, which gcsfs retries for ~32 s before it
    copies and deletes instead; real GCS implements moves."""
    import gcsfs.retry

    monkeypatch.setattr(gcsfs.retry, "errs", gcsfs.retry.errs - {501, "501"})


def test_checkpoint_store_commits_lists_and_prunes_on_gs(emulator) -> None:
    store = CheckpointStore(f"gs://{BUCKET}/store")
    assert store.remote and store.latest() is None
    for step in (10, 20, 30):
        store.fs.pipe_file(f"{store._path(step)}/shard-0", b"weights")
        store.commit(step, {"world_size": 1})
    store.fs.pipe_file(f"{store._path(40)}/shard-0", b"half written")  # no marker
    store.fs.invalidate_cache()
    assert store.latest() == 30 and store.steps()[40] is False
    assert store.prune(keep_last=2) == [10]
    store.fs.invalidate_cache()
    assert sorted(store.steps()) == [20, 30, 40]


def test_a_checkpoint_round_trips_through_gs(emulator, no_retry_on_501) -> None:
    ckpt = Checkpointer(CheckpointConfig(uri=f"gs://{BUCKET}/run", interval_steps=1))
    weights = torch.arange(64, dtype=torch.float32)
    ckpt.save(5, {"w": weights})
    ckpt.close()
    restored = {"w": torch.zeros(64)}
    assert ckpt.load(restored) == 5 and torch.equal(restored["w"], weights)


def test_the_code_store_uploads_to_gs(emulator) -> None:
    uri = FsspecStore(f"gs://{BUCKET}/code/").put("train-a-0123.zip", b"PK zip bytes")
    assert uri == f"gs://{BUCKET}/code/train-a-0123.zip"
    with fsspec.open(uri, "rb") as handle:
        assert handle.read() == b"PK zip bytes"
