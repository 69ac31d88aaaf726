"""The producer stage on an auxiliary worker: a real proxy and worker (in a process of their
own) serve fetches to every rank's real pipeline, whose batches and resume must be exactly
those of local producers."""

from __future__ import annotations

import multiprocessing as mp
import signal
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from runtime.aux.client import Endpoint, ServiceHandle
from runtime.aux.proxy import ProxyCore
from runtime.aux.worker import WorkerCore
from runtime.components import locate
from runtime.data.aux_producer import ProducerService, remote_source
from runtime.data.config import PRODUCER_SERVICE_IMPL, DataConfig
from runtime.data.loader import DataPipeline

DATA: dict[str, Any] = {
    "datasets": [
        {"name": "a", "_target_": "runtime.data.synthetic.SyntheticImages",
         "length": 40, "size": 8},
        {"name": "b", "_target_": "runtime.data.synthetic.SyntheticImages",
         "length": 13, "size": 8, "weight": 0.5},
    ],
    "batch_size": 6,
    "transform": {"_target_": "runtime.data.synthetic.augment"},  # random: seeded per sample
    "seed": 11,
    "chunk_size": 4,
    "start_method": "fork",
    "timeout_s": 120,
}


def _serve(folder: str, address: Any) -> None:
    """One proxy and one auxiliary loader worker, until SIGTERM."""
    proxy = ProxyCore("loader", "p", "127.0.0.1", f"ipc://{folder}/loader.sock")
    worker = WorkerCore("loader", "w0", proxy.backend_address, ProducerService(DATA), 64)
    worker.service.startup_check()

    def stop(*_: object) -> None:
        proxy.stop.set()
        worker.stop.set()

    signal.signal(signal.SIGTERM, stop)
    threads = [proxy.start_thread(), worker.start_thread()]
    address.put(proxy.address)
    for thread in threads:
        thread.join()


@pytest.fixture(scope="module")
def loader() -> Iterator[ServiceHandle]:
    """The auxiliary loader's handle. Its process is spawned: it must not inherit the test
    process's sockets or threads."""
    spawn = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        address = spawn.Queue()
        server = spawn.Process(target=_serve, args=(folder, address), daemon=True)
        server.start()
        yield ServiceHandle("loader", (Endpoint(address.get(timeout=120), 1),), 60.0, 1)
        server.terminate()
        server.join(30)


def _take(pipe: DataPipeline, n: int) -> list[dict[str, torch.Tensor]]:
    return [next(pipe) for _ in range(n)]


def _same(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x["index"], y["index"]) and torch.equal(x["image"], y["image"])
        and torch.equal(x["label"], y["label"])
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.slow
def test_auxiliary_producers_give_every_rank_the_local_batches(loader: ServiceHandle) -> None:
    """Two ranks share one auxiliary loader; each gets exactly its local stream (random
    transforms included), across an epoch boundary (53 samples, 12 per global batch)."""
    config = DataConfig(**DATA)
    for rank in (0, 1):
        with DataPipeline(config, rank=rank, world_size=2) as local:
            expected = _take(local, 6)
        with DataPipeline(config, rank=rank, world_size=2,
                          source=remote_source(loader, rank)) as remote:
            assert _same(_take(remote, 6), expected)


@pytest.mark.slow
def test_auxiliary_producers_resume_exactly_with_another_producer_count(
    loader: ServiceHandle,
) -> None:
    config = DataConfig(**DATA)
    with DataPipeline(config, source=remote_source(loader, 0)) as first:
        head = _take(first, 3)
        state = first.state_dict()
        tail = _take(first, 4)
    more_producers = DataConfig(**{**DATA, "producers": 3})
    with DataPipeline(more_producers, state=state, source=remote_source(loader, 0)) as resumed:
        assert _same(_take(resumed, 4), tail)
    with DataPipeline(config) as local:  # and the whole stream is the local one
        assert _same(_take(local, 7), head + tail)


def test_the_configured_producer_impl_is_this_service() -> None:
    """The name training configs must give a producer service (runtime.data.config)."""
    assert locate(PRODUCER_SERVICE_IMPL.replace(":", "."), "impl") is ProducerService
