"""Fault tolerance's pure parts and the loader's quorum placement, in one process: the
global sample stream under changing quorums, shrink requests, which controller asks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.data.config import DataConfig
from runtime.errors import ConfigError
from runtime.ft.batches import QuorumBatches
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


class Group:
    """One replica group of one rank: its QuorumBatches, and the model of what its weights
    hold: torchft's step count, the stream position and the samples trained into them."""

    def __init__(self) -> None:
        self.layout = (0, 1)
        self.batches = QuorumBatches(_data(), lambda: self.layout)
        self.step, self.position, self.trained = 0, 0, list[int]()

    def heal_from(self, peer: Group) -> None:
        """torchft sends a group behind its peer's state (manager.py, `_async_quorum`)."""
        self.batches.load_state_dict(peer.batches.state_dict())
        self.step, self.position, self.trained = peer.step, peer.position, list(peer.trained)

    def read(self, slot: int, world: int, accum: int) -> None:
        """One step's micro-batches, placed as (slot, world), checked against the model."""
        self.layout = (slot, world)
        for micro in range(accum):
            next(self.batches)
            start = self.position + (micro * world + slot) * BATCH
            assert self.batches.indices[-BATCH:] == list(range(start, start + BATCH))


# One step: which groups are in the quorum, which of them commit (torchft's should_commit
# may differ between groups: a peer died after some had voted), micro-batches per step,
# and which group is killed and restarted fresh afterwards (None: no one).
steps = st.lists(st.tuples(st.sets(st.integers(0, 2), min_size=1), st.sets(st.integers(0, 2)),
                           st.integers(1, 2), st.none() | st.integers(0, 2)),
                 min_size=1, max_size=6)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(steps)
def test_the_stream_is_read_once_under_quorum_changes_commits_discards_and_heals(
    plan: list[tuple[set[int], set[int], int, int | None]]
) -> None:
    groups = [Group() for _ in range(3)]
    try:
        for members, committers, accum, killed in plan:
            _one_step([groups[g] for g in sorted(members)],
                      [groups[g] for g in committers & members], accum)
            if killed is not None:
                groups[killed].batches.close()
                groups[killed] = Group()  # a replacement: fresh, at step 0
        final = max(groups, key=lambda group: group.step)  # the weights that go on
        assert sorted(final.trained) == list(range(final.position))  # once each, none skipped
        assert final.batches.state_dict() == {"epoch": 0, "offset": final.position}
    finally:
        for group in groups:
            group.batches.close()


def _one_step(members: list[Group], committers: list[Group], accum: int) -> None:
    """A quorum of `members` (in order: torchft's replica ranks): the ones behind heal from
    the one at the highest step; each reads its slot; `committers` apply the step, whose
    gradient average holds every member's samples; the others discard it."""
    ahead = max(members, key=lambda group: group.step)
    for group in members:
        if group.step < ahead.step:  # torchft heals a group behind (its manager.rs)
            group.heal_from(ahead)
    world = len(members)
    for slot, group in enumerate(members):
        group.read(slot, world, accum)
    samples = list(range(ahead.position, ahead.position + accum * world * BATCH))
    for slot, group in enumerate(members):
        if group in committers:
            group.batches.commit()
            spans = group.batches.taken()  # the ledger's record of the step
            assert [(s.slot, s.slots, s.batch_start) for s in spans] == [
                (slot, world, group.position + m * world * BATCH) for m in range(accum)]
            group.step, group.position = group.step + 1, group.position + len(samples)
            group.trained += samples
            assert group.batches.state_dict() == {"epoch": 0, "offset": group.position}
        else:
            group.batches.discard()
            assert group.batches.taken() == []  # a discarded step leaves no record


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
