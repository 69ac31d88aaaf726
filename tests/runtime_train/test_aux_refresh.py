"""Weight refresh over real gloo groups, a real TCPStore and the real proxy and workers (in
threads of this process): versions arrive whole, requests get the version they ask for, and
a restarted worker never serves weights older than the newest published before it came back.
The Ray-hosted version, with a killed worker actor, is in test_aux_ray.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from runtime.aux.config import OnWorkerLoss
from runtime.aux.refresh import RefreshHub, RefreshPoint, WeightPublisher
from testing.wait import wait_until
from tests.runtime_train.fabric import Fabric
from tests.runtime_train.versioned import Versioned, consistent, weights


@pytest.fixture
def refreshed(tmp_path: Path):
    hub = RefreshHub("127.0.0.1")
    point = hub.point("echo", "gloo")
    built = Fabric(tmp_path, OnWorkerLoss.RETRY, 64)
    for name in ("w0", "w1"):
        built.add_worker(name, Versioned(name), refresh=point)
    publisher = WeightPublisher(point)
    yield built, point, publisher
    publisher.close()
    built.close()


def _wait_for_workers(publisher: WeightPublisher, count: int) -> None:
    wait_until(lambda: len(publisher.workers) >= count, 120,
               f"{count} workers to join the refresh group")


def test_versions_arrive_whole_under_concurrent_requests(refreshed) -> None:
    fabric, point, publisher = refreshed
    _wait_for_workers(publisher, 2)
    replies: list[dict] = []
    stop = threading.Event()

    def hammer(rank: int) -> None:
        client = fabric.client(rank, refresh=point)
        while not stop.is_set():
            replies.append(client.call("read"))
        client.close()

    threads = [threading.Thread(target=hammer, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    checker = fabric.client(9)
    for version in range(1, 16):
        assert publisher.publish(weights(version)) == version
        reply = checker.call("read", min_version=version)
        assert reply["version"] >= version and consistent(reply)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert replies and all(consistent(reply) for reply in replies)


def test_a_request_asking_for_a_version_waits_for_it(refreshed) -> None:
    fabric, _, publisher = refreshed
    _wait_for_workers(publisher, 2)
    client = fabric.client(0)
    pending = client.submit("read", min_version=1)  # nothing published yet: STALE, resent
    other = client.submit("read")  # any version: served now, while `pending`'s STALE waits
    assert client.result(other)["version"] == 0
    # Publish only once `pending` has been answered STALE (and sent again): it has waited.
    entry, answer = client._pending[pending], {}
    waiter = threading.Thread(target=lambda: answer.update(client.result(pending)))
    waiter.start()
    wait_until(lambda: entry.stale >= 1, 60, "a STALE answer to the request for version 1")
    publisher.publish(weights(1))
    waiter.join(60)
    assert answer["version"] == 1


def test_a_restarted_worker_serves_the_newest_version_first(refreshed) -> None:
    fabric, point, publisher = refreshed
    _wait_for_workers(publisher, 2)
    for version in (1, 2, 3):
        publisher.publish(weights(version))
    dead = fabric.workers[1]
    dead.stop.set()
    fabric.threads[2].join(30)  # w1's serving thread
    fabric.add_worker("w1", Versioned("w1-restarted"), refresh=point)  # same id, new life
    client, deadline = fabric.client(0), time.monotonic() + 120
    while True:  # until the restarted worker has served (it gets v3 when the publisher sees it)
        reply = client.call("read")  # no minimum asked
        assert reply["version"] == 3 and consistent(reply)
        if reply["worker"] == "w1-restarted":
            break
        assert time.monotonic() < deadline, "the restarted worker never served"


def test_a_service_without_load_weights_is_refused(tmp_path: Path) -> None:
    from runtime.aux.refresh import RefreshError
    from runtime.aux.services import EchoService
    from runtime.aux.worker import WorkerCore

    point = RefreshPoint("127.0.0.1", 1, "x", "gloo")
    with pytest.raises(RefreshError, match="no load_weights"):
        WorkerCore("echo", "w", f"ipc://{tmp_path}/x.sock", EchoService(), 4, refresh=point)
