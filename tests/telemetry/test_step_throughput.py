"""Throughput of real training in `train_steps`: tokens/s, MFU and peak memory per rank.

A RankTelemetry writes through the real writer and clickhouse-connect to the ClickHouse HTTP
double (chDB's engine behind real HTTP: testing/doubles/clickhouse_http.py), so the rows read
back are what the store kept; the peak FLOP/s comes from the catalog (rendered as
GKR_PEAK_TFLOPS) or the config's override.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from generator.catalog import Catalog
from generator.errors import InvalidInput
from generator.pods import plan_pods
from generator.render import render_tree
from runtime.errors import ConfigError
from runtime.identity import Env, Role
from runtime.pods import build_pod
from runtime.run.config import TrainConfig
from runtime.telemetry.columns import schema_columns
from runtime.telemetry.config import TelemetryConfig
from runtime.telemetry.store import Store
from runtime.telemetry.throughput import TERA, mfu, peak_flops, summary_line
from runtime.train.telemetry import Destination, RankTelemetry, RunTelemetry
from testing.doubles.clickhouse_http import ClickHouseHttpServer
from tests.generator.conftest import VALID_SPEC, ScratchRepo

RUN = "throughput-run"
SEQ = 128  # tokens per sample of the synthetic steps
FLOPS_PER_TOKEN = 6 * 1_000_000.0  # a 1 M-parameter model, attention aside
ACCELERATORS = ["H100", "H100-Mega", "H200", "B200"]


@pytest.fixture
def dsn(tmp_path: Path) -> Iterator[str]:
    with ClickHouseHttpServer(tmp_path / "server", {"gkr": "pw"}) as server:
        yield server.dsn("gkr", "pw", "telemetry")


def _steps(dsn: str, rank: int, flops_per_token: float | None, **telemetry: Any) -> None:
    section = TelemetryConfig(dsn=dsn, time_collectives=False, **telemetry)
    ranked = RankTelemetry(TrainConfig(telemetry=section), Destination(dsn), RUN, rank,
                           world_size=2, nnodes=1, flops_per_token=flops_per_token)
    model = torch.nn.Linear(64, 64)
    for step, batch in enumerate((4, 8, 2)):
        loss = model(torch.randn(batch, 64)).square().mean()
        loss.backward()
        ranked.step(step, loss.detach(), samples=batch, tokens=batch * SEQ)
    ranked.close()


def _rows(dsn: str) -> dict[tuple[int, int], dict[str, Any]]:
    with Store.connect(dsn, migrate=False) as store:
        rows = store.query("SELECT * FROM train_steps WHERE run = {run:String}",
                           {"run": RUN}).dicts()
    return {(row["rank"], row["step"]): row for row in rows}


def test_a_rank_writes_tokens_per_s_mfu_and_memory_each_step(dsn, monkeypatch) -> None:
    monkeypatch.setenv(Env.PEAK_TFLOPS, "989")
    _steps(dsn, rank=0, flops_per_token=FLOPS_PER_TOKEN)
    _steps(dsn, rank=1, flops_per_token=None)  # a model without flops_per_token
    rows = _rows(dsn)
    assert sorted(rows) == [(r, s) for r in (0, 1) for s in range(3)]
    for (rank, step), row in rows.items():
        batch = (4, 8, 2)[step]
        assert row["tokens"] == batch * SEQ
        assert row["step_time_s"] > 0
        assert math.isclose(row["tokens_per_s"], batch * SEQ / row["step_time_s"])
        assert math.isclose(row["samples_per_s"], batch / row["step_time_s"])
        assert math.isfinite(row["loss"])
        assert row["rss_peak_bytes"] > 10 * 2**20  # torch alone holds more than 10 MiB
        assert row["cuda_peak_allocated_bytes"] is None  # CUDA never used here
        assert row["cuda_peak_reserved_bytes"] is None
        if rank == 0:
            assert math.isclose(row["mfu"],
                                row["tokens_per_s"] * FLOPS_PER_TOKEN / (989 * TERA))
        else:
            assert row["mfu"] is None


def test_the_config_override_is_the_peak_where_nothing_rendered_one(dsn, monkeypatch) -> None:
    monkeypatch.delenv(Env.PEAK_TFLOPS, raising=False)
    _steps(dsn, rank=0, flops_per_token=FLOPS_PER_TOKEN, peak_tflops=0.5)  # a CPU's peak
    _steps(dsn, rank=1, flops_per_token=FLOPS_PER_TOKEN)  # neither: unknown, not guessed
    rows = _rows(dsn)
    for step in range(3):
        row = rows[(0, step)]
        assert math.isclose(row["mfu"], row["tokens_per_s"] * FLOPS_PER_TOKEN / 0.5e12)
        assert rows[(1, step)]["mfu"] is None


def test_the_drivers_closing_line_says_the_runs_throughput(dsn, monkeypatch) -> None:
    monkeypatch.setenv(Env.PEAK_TFLOPS, "989")
    driver = RunTelemetry(Destination(dsn), RUN)
    _steps(dsn, rank=0, flops_per_token=FLOPS_PER_TOKEN)
    line = driver.close()
    row = list(_rows(dsn).values())
    tokens = sum(r["tokens_per_s"] for r in row) / len(row)
    rss = max(r["rss_peak_bytes"] for r in row)
    assert line.startswith("telemetry: 3 step rows, ")
    assert f"({tokens:,.0f} tokens/s per rank, MFU {tokens * FLOPS_PER_TOKEN / 989e12:.1%}, " \
           f"peak RSS {rss / 2**30:.1f} GiB) in " in line


def test_the_throughput_line_names_the_memory_it_measured() -> None:
    assert summary_line(None, None, None, None) == ""
    assert summary_line(12_345.6, None, None, 3 * 2**30) == \
        "12,346 tokens/s per rank, peak RSS 3.0 GiB"
    assert summary_line(9_000, 0.382, 70 * 2**30, 3 * 2**30) == \
        "9,000 tokens/s per rank, MFU 38.2%, peak CUDA memory 70.0 GiB"


def test_mfu_is_model_flops_per_second_over_the_peak() -> None:
    # 9,000 tokens/s of a 7 B model (6N = 42 GFLOP a token) on one H100 (989 TFLOP/s): 38 %.
    assert math.isclose(mfu(9_000, 42e9, 989e12), 9_000 * 42e9 / 989e12)
    assert math.isclose(mfu(9_000, 42e9, 989e12), 0.3822, rel_tol=1e-3)
    assert mfu(9_000, None, 989e12) is None
    assert mfu(9_000, 42e9, None) is None


def test_the_peak_comes_from_the_override_then_the_pod_environment() -> None:
    assert peak_flops(None, {Env.PEAK_TFLOPS: "989"}) == 989e12
    assert peak_flops(None, {Env.PEAK_TFLOPS: "2250"}) == 2250e12
    assert peak_flops(312.0, {Env.PEAK_TFLOPS: "989"}) == 312e12
    assert peak_flops(None, {}) is None
    assert peak_flops(None, {Env.PEAK_TFLOPS: " "}) is None


@pytest.mark.parametrize("value", ["fast", "0", "-5", "inf", "nan"])
def test_a_malformed_peak_variable_is_an_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        peak_flops(None, {Env.PEAK_TFLOPS: value})
    assert raised.value.field == Env.PEAK_TFLOPS
    assert "positive number of TFLOP/s" in str(raised.value)


@pytest.mark.parametrize("value", [0, -1, float("inf")])
def test_the_config_override_must_be_a_positive_number(value: float) -> None:
    with pytest.raises(ValueError, match="peak_tflops"):
        TelemetryConfig(peak_tflops=value)


def test_the_new_columns_are_what_the_store_holds(dsn) -> None:
    """columns.py reads the ALTER of migration 0007 as the engine applies it."""
    with Store.connect(dsn) as store:
        found = dict(store.query("SELECT name, type FROM system.columns WHERE database = "
                                 "currentDatabase() AND table = 'train_steps'").rows)
    assert found == schema_columns()["train_steps"]
    assert found["mfu"] == "Nullable(Float64)" and found["rss_peak_bytes"] == "Nullable(UInt64)"


def test_every_catalog_accelerator_has_its_datasheet_peak(tmp_path) -> None:
    accelerators = Catalog(ScratchRepo(tmp_path).root).accelerators
    assert {name: a.peak_tflops for name, a in accelerators.items()} == {
        "H100": 989, "H100-Mega": 989, "H200": 989, "B200": 2250}


@pytest.mark.parametrize(("old", "new", "words"), [
    ("    peak_tflops: 989\n", "", "required field is missing"),
    ("    peak_tflops: 989\n", "    peak_tflops: 0\n", "greater than 0"),
    ("    peak_tflops: 989\n", "    peak_tflops: lots\n", "valid number"),
])
def test_the_catalog_refuses_a_missing_or_wrong_peak(tmp_path, old, new, words) -> None:
    repo = ScratchRepo(tmp_path)
    path = repo.root / "platform/catalog/accelerators.yaml"
    path.write_text(path.read_text().replace(old, new, 1))
    repo.write_spec("a", VALID_SPEC)
    with pytest.raises(InvalidInput) as raised:
        render_tree(repo.root, use_cache=False)
    problems = [p for p in raised.value.problems if p.field == "accelerators.H100.peak_tflops"]
    assert problems and words in problems[0].message, raised.value.problems
    assert problems[0].file == "platform/catalog/accelerators.yaml"


def _env(pod: dict[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_gpu_pods_get_their_accelerators_peak_and_cpu_pods_none(tmp_path, accelerator) -> None:
    repo = ScratchRepo(tmp_path)
    repo.write_spec("peak", {**VALID_SPEC, "accelerator": accelerator})
    job = render_tree(repo.root, use_cache=False).jobs[0]
    pods = {role: build_pod(plan) for role, plan in plan_pods(job).items()}
    peak = Catalog(repo.root).accelerators[accelerator].peak_tflops
    assert float(_env(pods[Role.WORKER])[Env.PEAK_TFLOPS]) == peak
    assert Env.PEAK_TFLOPS not in _env(pods[Role.HEAD])  # the Ray head is a CPU pod


def test_the_committed_tree_carries_the_peak_in_every_gpu_worker() -> None:
    """What Argo CD applies: every rendered GPU container has GKR_PEAK_TFLOPS."""
    root = Path(__file__).resolve().parents[2]
    found = 0
    for path in (root / "kustomize/overlays").glob("*/jobs/*/*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            for container in _containers(document):
                gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
                values = {e["name"]: e.get("value") for e in container.get("env", [])}
                assert (Env.PEAK_TFLOPS in values) == bool(gpus), (path, container["name"])
                found += bool(gpus)
    assert found > 0


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if "containers" in node:
            yield from node["containers"]
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _containers(value)
