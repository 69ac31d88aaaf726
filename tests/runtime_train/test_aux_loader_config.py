"""Producers on an auxiliary loader, chosen by configuration (`data.producer_service`): the
config errors that name the file, the field and what is allowed, and a real run (Ray Train
ranks with gloo, the loader as a Ray actor behind its proxy) whose batches are those of local
producers and which resumes exactly, with another producer count."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import default_collate

from runtime.data.config import DataConfig
from runtime.data.loader import DataPipeline
from runtime.data.synthetic import jitter
from runtime.errors import ConfigError
from runtime.run.config import build_config
from runtime.train.compose import compose_raw, load_config
from runtime.train.driver import run_training
from testing.ray import private_ray

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/train/aux-loader.yaml"
HERE = "tests.runtime_train.test_aux_loader_config"
LOG = "GKR_TEST_COLLATED"  # where logged_collate appends; unset: it logs nothing
BATCH, WORLD = 8, 2


def marked_jitter(sample: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The example's random transform, marking the sample with the process that ran it."""
    return {**jitter(sample), "pid": torch.tensor(os.getpid())}


def logged_collate(samples: list[Any]) -> Any:
    """default_collate, logging each batch: its sample indices, a digest of its inputs and
    the processes that transformed its samples."""
    batch = default_collate(samples)
    if LOG in os.environ:
        line = {"index": batch["index"].tolist(), "input": _digest(batch["input"]),
                "pids": sorted(set(batch["pid"].tolist()))}
        with open(os.environ[LOG], "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
    return batch


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()


def _errors(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLE, overrides)
    assert str(caught.value).startswith(f"{EXAMPLE}: "), caught.value  # names the file
    return caught.value


def test_the_example_selects_the_loader_service() -> None:
    config = load_config(EXAMPLE)
    assert config.data is not None and config.data.producer_service == "loader"
    assert DataConfig(**config.aux.services["loader"].options["data"]) == config.data


def test_a_producer_service_that_is_not_configured_names_the_allowed_ones() -> None:
    error = _errors(["data.producer_service=nope"])
    assert error.field == "data.producer_service"
    assert "'nope' is not in aux.services; allowed: loader, teacher" in error.message


def test_a_service_that_is_not_a_producer_service_is_refused() -> None:
    error = _errors(["data.producer_service=teacher"])
    assert error.field == "aux.services.teacher.impl"
    assert "allowed: runtime.data.aux_producer:ProducerService" in error.message


def test_the_loader_must_serve_the_data_section() -> None:
    error = _errors(["~aux.services.loader.options.data"])
    assert error.field == "aux.services.loader.options.data"
    assert "write `data: ${data}`" in error.message
    raw = compose_raw(EXAMPLE)
    raw["aux"]["services"]["loader"]["options"]["data"]["transform"] = None
    with pytest.raises(ConfigError, match=r"aux\.services\.loader\.options\.data: its transform "
                                          r"differs from the data section's"):
        build_config(raw, str(EXAMPLE))


def test_auxiliary_producers_serve_torchft_replica_groups() -> None:
    """Accepted with fault tolerance (tests/runtime_ft/test_ft_aux_producer.py trains so)."""
    config = load_config(EXAMPLE, ["fault_tolerance.enabled=true"])
    assert config.fault_tolerance.enabled and config.data is not None
    assert config.data.producer_service == "loader"


@pytest.fixture(scope="module")
def collated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local Ray whose processes (ranks, their producers, the loader) log every batch they
    collate to the file yielded; the aux worker imports this module from the checkout."""
    log = tmp_path_factory.mktemp("collated") / "batches.jsonl"
    env = {"env_vars": {"PYTHONPATH": str(ROOT), LOG: str(log)}}
    with private_ray(num_cpus=5, include_dashboard=False, logging_level=logging.WARNING,
                     runtime_env=env):
        yield log


def _overrides(uri: Path, steps: int, producers: int) -> list[str]:
    return [f"run.steps={steps}", "run.log_every=1", "logging.fleet_every_steps=0",
            "telemetry.enabled=false", f"checkpoint.uri={uri}", "checkpoint.interval_steps=2",
            f"data.batch_size={BATCH}", f"data.chunk_size={BATCH // 2}",
            f"data.producers={producers}", f"data.transform={{_target_: {HERE}.marked_jitter}}",
            f"++data.collate={{_target_: {HERE}.logged_collate}}"]


def _drain(log: Path) -> list[dict[str, Any]]:
    """The batches logged since the last call (each run collates a window ahead)."""
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [json.loads(line) for line in lines]


def _local_stream(data: DataConfig, rank: int, n: int) -> list[tuple[list[int], str]]:
    """What local producers give rank `rank`: (indices, input digest) of its first n batches."""
    with DataPipeline(data.model_copy(update={"producer_service": None}), rank=rank,
                      world_size=WORLD) as local:
        return [(b["index"].tolist(), _digest(b["input"])) for b in (next(local)
                                                                    for _ in range(n))]


def _places(logged: list[dict[str, Any]], streams: list[list[tuple[list[int], str]]]
            ) -> list[list[int]]:
    """Where each logged batch is in its rank's local stream, per rank, in order; a batch must
    match its place there, inputs included (a collator collates a batch once its chunks are
    in, so the log is not in stream order)."""
    place = {tuple(index): (rank, at, digest) for rank, stream in enumerate(streams)
             for at, (index, digest) in enumerate(stream)}
    found: list[list[int]] = [[] for _ in streams]
    for line in logged:
        rank, at, digest = place[tuple(line["index"])]
        assert line["input"] == digest, f"rank {rank} batch {at} has other inputs"
        found[rank].append(at)
    return [sorted(places) for places in found]


def _read(places: list[int], trained: range, window: int) -> bool:
    """Whether a run collated each batch at most once, every batch it trained on, and
    otherwise only batches of the window read ahead of them."""
    ahead = range(trained.start, trained.stop + window)
    return len(set(places)) == len(places) and set(trained) <= set(places) <= set(ahead)


@pytest.mark.slow
def test_auxiliary_producers_give_the_local_batches_and_resume_exactly(
    collated: Path, tmp_path: Path
) -> None:
    uri = tmp_path / "ckpt"
    first = run_training(load_config(EXAMPLE, _overrides(uri, 4, producers=2)),
                         echo=lambda line: None)
    assert first.checkpoints == (2, 4) and sorted(first.losses) == [1, 2, 3, 4]
    before = _drain(collated)
    resumed = run_training(load_config(EXAMPLE, _overrides(uri, 6, producers=3)),
                           echo=lambda line: None)
    assert resumed.resumed is not None and resumed.resumed.step == 4
    assert sorted(resumed.losses) == [5, 6]
    after = _drain(collated)

    data = load_config(EXAMPLE, _overrides(uri, 6, 1)).data
    assert data is not None
    window = data.collators * data.prefetch_batches  # batches a pipeline reads ahead
    streams = [_local_stream(data, rank, 6 + window) for rank in (0, 1)]
    for rank in (0, 1):
        assert _read(_places(before, streams)[rank], range(0, 4), window)
        assert _read(_places(after, streams)[rank], range(4, 6), window)  # resumed at 4
    for run in (before, after):  # one loader worker transformed every sample of a run
        assert len({pid for line in run for pid in line["pids"]}) == 1
