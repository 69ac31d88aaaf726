"""Fault tolerance's pure parts and the loader's quorum placement, in one process: the
global sample stream under changing quorums, shrink requests, which controller asks."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.data.config import DataConfig
from runtime.errors import ConfigError
from runtime.ft.batches import QuorumBatches, SampleLedger
from runtime.ft.config import FaultToleranceConfig
from runtime.ft.group import dropped_groups
from runtime.ft.shrink import Board, Drop, shrink_request
from runtime.identity import Identity
from runtime.run.config import build_config
from runtime.warden.model import ShrinkRequest

BATCH = 3


def _data() -> DataConfig:
    return DataConfig.model_validate({
        "datasets": [{"name": "f", "_target_": "runtime.data.synthetic.SyntheticFeatures",
                      "length": 10_000, "dim": 2}],
        "batch_size": BATCH, "shuffle": False, "producers": 1, "start_method": "fork",
    })


class Rank:
    """One rank's QuorumBatches, placed by a layout the test sets."""

    def __init__(self, ledger: Path, name: str) -> None:
        self.layout = (0, 1)
        self.batches = QuorumBatches(_data(), lambda: self.layout,
                                     SampleLedger(str(ledger), 0, int(name)))
        self.read: list[int] = []

    def step(self, slot: int, world: int, commit: bool) -> None:
        self.layout = (slot, world)
        next(self.batches)
        if commit:
            self.read += self.batches.indices
            self.batches.commit(len(self.read))
        else:
            self.batches.discard()


def test_samples_are_read_once_across_quorum_changes_and_discarded_steps(tmp_path: Path) -> None:
    a, b, c = (Rank(tmp_path, str(i)) for i in range(3))
    try:
        for _ in range(2):  # three groups
            for slot, rank in enumerate((a, b, c)):
                rank.step(slot, 3, commit=True)
        for slot, rank in enumerate((a, b, c)):  # b dies mid-step: nobody commits
            rank.step(slot, 3, commit=False)
        c.batches.load_state_dict(a.batches.state_dict())  # the quorum moved on together
        for _ in range(2):  # two groups: c is now the second slot
            a.step(0, 2, commit=True)
            c.step(1, 2, commit=True)
        b.batches.load_state_dict(a.batches.state_dict())  # a replacement heals from a peer
        for slot, rank in enumerate((a, b, c)):
            rank.step(slot, 3, commit=True)
    finally:
        for rank in (a, b, c):
            rank.batches.close()
    trained = sorted(a.read + b.read + c.read)
    assert trained == list(range(len(trained)))  # no sample twice, none skipped
    assert len(trained) == (2 * 3 + 2 * 2 + 3) * BATCH
    assert a.batches.state_dict() == {"epoch": 0, "offset": len(trained)}
    assert len((tmp_path / "group-0-rank-0.jsonl").read_text().splitlines()) == 5


def test_shrink_request_names_only_the_pods_the_dropped_group_held() -> None:
    ft = FaultToleranceConfig(enabled=True, replica_groups=3, worker_group="gpu")
    pods = {0: {"w-a", "w-b"}, 1: {"w-b", "w-c", "w-d"}, 2: {"w-e"}}
    who = Identity(namespace="team-a", job="pretrain")
    request = shrink_request("run-1", Drop(group=1, quorum=7, step=30), pods, ft, who)
    assert request == ShrinkRequest("run-1-g1-q7", "team-a", "pretrain", "gpu", 2,
                                    ["w-c", "w-d"])
    local = shrink_request("run-1", Drop(2, 8, 31), {}, ft, Identity())
    assert (local.remove, local.workers_to_delete, local.cluster) == (0, [], "run-1")


def test_the_board_records_every_request_and_applies_each_id_once() -> None:
    board = Board()
    request = ShrinkRequest("r-g1-q2", "", "c", "workers", 1)
    assert board.shrink(request).applied and not board.shrink(request).applied
    assert board.shrinks() == [request, request]
    board.stop("first")
    board.stop("second")
    assert board.stopped() == "first"


@pytest.mark.parametrize(("previous", "current", "me", "expected"), [
    ({0, 1, 2}, {0, 2}, 0, [1]),  # the lowest survivor asks
    ({0, 1, 2}, {0, 2}, 2, []),  # another survivor does not
    ({0, 1, 2}, {1, 2}, 1, [0]),  # the lowest group itself dropped: the next one asks
    ({0, 2}, {0, 1, 2}, 0, []),  # a group joined: nothing to shrink
    (set(), {0, 1}, 0, []),  # the first quorum this rank sees
])
def test_only_the_lowest_group_in_the_quorum_asks_for_a_shrink(
    previous: set[int], current: set[int], me: int, expected: list[int]
) -> None:
    assert dropped_groups(frozenset(previous), frozenset(current), me) == expected


def test_fault_tolerance_needs_the_data_stream_and_room_for_its_groups() -> None:
    ft = {"enabled": True, "replica_groups": 3}
    with pytest.raises(ConfigError, match="needs a `data` section"):
        build_config({"fault_tolerance": ft})
    data = {"datasets": [{"name": "f", "_target_": "runtime.data.synthetic.SyntheticFeatures"}],
            "batch_size": 2}
    with pytest.raises(ConfigError, match=r"max_world_size \(2\) is below"):
        build_config({"fault_tolerance": ft, "data": data, "layout": {"max_world_size": 2}})
    with pytest.raises(ConfigError, match=r"min_replica_groups \(4\) exceeds"):
        build_config({"fault_tolerance": {**ft, "min_replica_groups": 4}, "data": data})
