"""DiLoCo on a toy task, with real processes on loopback: the synchroniser
(`python -m runtime.diloco`), learners that run `runtime.diloco.learner` (tests/diloco/toy.py),
and torchft's own DiLoCo with its Manager, gloo process groups and a real Lighthouse."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from torchft._torchft import LighthouseServer

from tests.diloco.procs import finish, start_synchroniser, start_toy, wait_for

STEPS, INNER = 60, 10  # six rounds


def _learners(folder: Path, endpoint: str, names: str, *flags: str) -> dict[str, dict]:
    """Run one toy learner per letter of `names`, each on its own data shard; their results."""
    running = {name: start_toy(folder, "learner", name, "--endpoint", endpoint, "--learner",
                               name, "--index", str(index), "--learners", str(len(names)),
                               *flags)
               for index, name in enumerate(names)}
    return {name: finish(folder, name, process) for name, process in running.items()}


@pytest.mark.slow
def test_one_learner_with_h1_and_outer_lr_1_is_plain_training(tmp_path: Path) -> None:
    """Outer SGD with lr 1 and no momentum sets the shared weights to the only snapshot:
    the learner's weights after every step are plain training's."""
    sync = start_synchroniser(tmp_path, "--learners", "a", "--outer-lr", "1",
                              "--outer-momentum", "0", "--no-nesterov")
    plain = start_toy(tmp_path, "plain", "plain", "--steps", "40")
    result = _learners(tmp_path, sync.endpoint, "a", "--steps", "40", "--inner", "1")["a"]
    expected = finish(tmp_path, "plain", plain)
    assert sync.wait() == 0
    assert len(sync.rounds()) == 40  # a merge after every step, all round-tripped
    torch.testing.assert_close(torch.tensor(result["weights"]), torch.tensor(expected["weights"]),
                               rtol=1e-6, atol=1e-7)
    assert result["after"] < result["before"] / 4


@pytest.mark.slow
def test_three_learners_reach_the_loss_of_torchfts_diloco(tmp_path: Path) -> None:
    """Same task, data shards, inner Adam, H = 10 and outer Nesterov SGD (0.7, 0.9): torchft's
    DiLoCo (three replica groups, allreduce of pseudo-gradients over gloo, a Lighthouse on
    loopback) and ours (snapshots over ZeroMQ to the synchroniser) end at the same loss.
    Stated tolerance: 1e-4 relative on the loss, 1e-5 absolute on every weight (the sums of
    three pseudo-gradients may round differently)."""
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=3)
    try:
        replicas = [start_toy(tmp_path, "torchft", f"torchft-{i}", "--lighthouse",
                              lighthouse.address(), "--index", str(i), "--learners", "3",
                              "--steps", str(STEPS), "--inner", str(INNER)) for i in range(3)]
        theirs = [finish(tmp_path, f"torchft-{i}", p) for i, p in enumerate(replicas)]
    finally:
        lighthouse.shutdown()
    assert {replica["commits"] for replica in theirs} == {STEPS // INNER}
    sync = start_synchroniser(tmp_path, "--learners", "a,b,c")
    ours = _learners(tmp_path, sync.endpoint, "abc", "--steps", str(STEPS), "--inner", str(INNER))
    assert sync.wait() == 0
    assert [r["learners"] for r in sync.rounds()] == [["a", "b", "c"]] * (STEPS // INNER)
    reference = theirs[0]
    for result in ours.values():
        assert result["after"] == pytest.approx(reference["after"], rel=1e-4)
        torch.testing.assert_close(torch.tensor(result["weights"]),
                                   torch.tensor(reference["weights"]), rtol=0, atol=1e-5)
    assert reference["after"] < reference["before"] / 4


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "merge"), [("barrier", "delta"), ("decoupled", "delta"),
                                             ("decoupled", "replace")])
def test_barrier_and_decoupled_modes_converge(tmp_path: Path, mode: str, merge: str) -> None:
    sync = start_synchroniser(tmp_path, "--learners", "a,b")
    results = _learners(tmp_path, sync.endpoint, "ab", "--steps", str(STEPS), "--inner",
                        str(INNER), "--mode", mode, "--merge", merge, "--step-delay", "0.01")
    assert sync.wait() == 0
    assert [r["learners"] for r in sync.rounds()] == [["a", "b"]] * (STEPS // INNER)
    for result in results.values():
        assert all(record["merged"] and record["sent"] > 0 and record["received"] > 0
                   for record in result["records"])
        assert result["after"] < result["before"] / 4


@pytest.mark.slow
def test_a_learner_killed_mid_round_is_dropped_and_rejoins(tmp_path: Path) -> None:
    """c stops inside round 2 and is killed with SIGKILL: a and b are merged without it after
    the round timeout and train to the end; a new c (same name) joins again, its snapshots
    are merged, and the synchroniser finishes once every learner has left."""
    sync = start_synchroniser(tmp_path, "--learners", "a,b,c", "--round-timeout", "20")
    flags = ("--inner", str(INNER), "--learners", "3", "--timeout", "120")
    steady = {name: start_toy(tmp_path, "learner", name, "--endpoint", sync.endpoint,
                              "--learner", name, "--index", str(index), "--steps", str(STEPS),
                              *flags)
              for index, name in enumerate("ab")}
    doomed = start_toy(tmp_path, "learner", "c", "--endpoint", sync.endpoint, "--learner", "c",
                       "--index", "2", "--steps", str(STEPS), "--pause-at", "15", *flags)
    wait_for(tmp_path / "c.paused")
    os.kill(doomed.pid, signal.SIGKILL)
    assert doomed.wait(60) == -signal.SIGKILL
    wait_for(sync.log, "dropped c")  # only then does c come back, to join a later round
    back = start_toy(tmp_path, "learner", "c2", "--endpoint", sync.endpoint, "--learner", "c",
                     "--index", "2", "--steps", "20", *flags)
    survivors = {name: finish(tmp_path, name, process) for name, process in steady.items()}
    returned = finish(tmp_path, "c2", back)
    assert sync.wait() == 0
    rounds = sync.rounds()
    assert rounds[0]["learners"] == ["a", "b", "c"]
    dropped = next(r["round"] for r in rounds if "c" in r["dropped"])
    assert dropped == 2 and rounds[1]["learners"] == ["a", "b"]
    for result in survivors.values():
        assert len(result["records"]) == STEPS // INNER  # every sync of its steps happened
        assert result["after"] < result["before"] / 4
    assert any(record["merged"] for record in returned["records"])
    assert any("c" in r["learners"] for r in rounds[dropped:])  # c is merged again


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["barrier", "decoupled"])
def test_a_learner_of_two_data_parallel_ranks_applies_each_merge_on_both(tmp_path: Path,
                                                                         mode: str) -> None:
    """Rank 0 talks to the synchroniser and broadcasts the merge: both DDP ranks hold the same
    weights after every round, here at the end."""
    sync = start_synchroniser(tmp_path, "--learners", "a,b")
    flags = ("--steps", "40", "--inner", str(INNER), "--mode", mode, "--learners", "2")
    pair = start_toy(tmp_path, "learner", "a", "--endpoint", sync.endpoint, "--learner", "a",
                     "--ranks", "2", *flags)
    single = start_toy(tmp_path, "learner", "b", "--endpoint", sync.endpoint, "--learner", "b",
                       "--index", "1", *flags)
    result, _ = finish(tmp_path, "a", pair), finish(tmp_path, "b", single)
    assert sync.wait() == 0
    assert [r["learners"] for r in sync.rounds()] == [["a", "b"]] * 4
    first, second = (torch.tensor(weights) for weights in result["rank_weights"])
    assert torch.equal(first, second)
    assert all(record["merged"] for record in result["records"])
