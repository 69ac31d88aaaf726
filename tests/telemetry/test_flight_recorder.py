"""Flight Recorder dumps from a real 2-rank gloo run (torch.distributed over a FileStore, two
spawned processes), parsed into `flight_recorder` rows in chDB and analysed by torch's own
analyzer, where rank 1 skips the last collective."""

from __future__ import annotations

import json
import pickle
import shutil
from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from runtime.identity import Identity
from runtime.telemetry import flight_recorder as fr
from runtime.telemetry.store import Store
from runtime.telemetry.writer import Row, TelemetryWriter

ENTRIES = {0: 4, 1: 3}  # rank 0 issues four collectives, rank 1 skips the fourth
SKIPPED = ("not all ranks joining collective 4 (gloo:all_reduce, process group 0:default_pg): "
           "missing ranks [1]")


class _Rows:
    """A RowSink that keeps the rows in memory: a rank process cannot open the test's chDB
    folder (one process per folder), and the rows it queued are what is checked."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def insert(self, table: str, rows: list[Row]) -> None:
        self.rows.extend({"table": table, **row} for row in rows)


def _rank(rank: int, world: int, store_file: str, out: str) -> None:
    """One rank: three collectives together; rank 0 issues a fourth that rank 1 skips (rank 1
    leaves, so rank 0's all-reduce fails, as a rank's would when a peer dies), then each rank
    dumps its buffer three ways: pickle file, JSON file and rows through a writer."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store_file, world), rank=rank,
                            world_size=world, timeout=timedelta(seconds=120))
    tensor = torch.ones(1024)
    dist.all_reduce(tensor)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, 0)
    if rank == 0:
        with suppress(RuntimeError):  # rank 1 never joins: what the dump must show
            dist.all_reduce(tensor)
    folder = Path(out)
    fr.dump_to(folder / "pickle")
    json_dump = torch._C._distributed_c10d._dump_fr_trace_json()
    (folder / "json").mkdir(exist_ok=True)
    (folder / "json" / f"{fr.PREFIX}{rank}.json").write_bytes(bytes(json_dump))
    sink = _Rows()
    writer = TelemetryWriter(sink, Identity(run="gloo-run", rank=rank))
    queued = fr.dump_rank(writer)
    writer.close()
    (folder / f"rows{rank}.json").write_text(json.dumps({"queued": queued, "rows": sink.rows},
                                                        default=str))


@pytest.fixture(scope="session")
def gloo_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dumps of one real 2-rank gloo run: `pickle/`, `json/` and `rows<rank>.json`."""
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("fr")
    mp.spawn(_rank, args=(2, str(out / "store"), str(out)), nprocs=2, start_method="spawn")
    return out


@pytest.mark.slow
def test_both_forms_give_the_same_rows_one_per_entry(gloo_dumps: Path) -> None:
    for rank, count in ENTRIES.items():
        from_pickle = fr.rows(fr.read_dump(gloo_dumps / "pickle" / f"{fr.PREFIX}{rank}"))
        from_json = fr.rows(fr.read_dump(gloo_dumps / "json" / f"{fr.PREFIX}{rank}.json"))
        # None (pickle) and 0 (JSON) both mean unset; progress may differ between the two
        # dumps (the broadcast can retire in between), the entries themselves may not.
        assert [_fixed(r) for r in from_pickle] == [_fixed(r) for r in from_json]
        assert len(from_pickle) == count
        assert [r["collective_seq_id"] for r in from_pickle] == list(range(1, count + 1))
        assert [r["profiling_name"] for r in from_pickle][:3] == [
            "gloo:all_reduce", "gloo:all_reduce", "gloo:broadcast"]
        first = from_pickle[0]
        assert (first["rank"], first["pg_name"], first["pg_desc"]) == (rank, "0", "default_pg")
        assert (first["input_sizes"], first["input_dtypes"]) == ("[[1024]]", ["Float"])
        # gloo's gaps (reference §2): no start/completion times, no duration, done = retired.
        assert (first["state"], first["retired"]) == ("scheduled", True)
        assert (first["time_started_ns"], first["duration_ms"]) == (0, None)
        assert from_pickle[-1]["last_enqueued"] == count


@pytest.mark.slow
def test_the_analysis_names_the_rank_that_skipped_a_collective(gloo_dumps: Path) -> None:
    findings = fr.analyze_dumps(gloo_dumps / "pickle")
    assert SKIPPED in findings
    assert any(f.startswith("process group 0: ranks [1] enqueued collectives up to 3")
               for f in findings)
    assert fr.analyze_dumps(gloo_dumps / "json") == findings  # JSON dumps: the same


@pytest.mark.slow
def test_torch_alone_fails_on_gloo_dumps_which_is_why_groups_are_rebuilt(
        gloo_dumps: Path) -> None:
    """The gap the workaround exists for; when torch fills gloo's pg_config, this fails and
    `pg_config` can go."""
    from torch.distributed.flight_recorder.components.builder import build_db
    from torch.distributed.flight_recorder.components.config_manager import JobConfig
    from torch.distributed.flight_recorder.components.loader import read_dir

    args = JobConfig().parse_args([str(gloo_dumps / "pickle"), "-p", fr.PREFIX])
    details, version = read_dir(args)
    with pytest.raises(KeyError, match=r"\('0', [01]\)"):  # (group, the first rank read)
        build_db(details, args, version)


@pytest.mark.slow
def test_agreeing_ranks_and_a_missing_dump(gloo_dumps: Path, tmp_path: Path) -> None:
    both = fr.read_folder(gloo_dumps / "pickle")
    agreeing = [_first(dump, 3) for dump in both]
    assert fr.analyze(agreeing) == []
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(gloo_dumps / "pickle" / f"{fr.PREFIX}0", alone)
    assert fr.analyze_dumps(alone) == ["no dump from ranks [1] of process group 0:default_pg"]


@pytest.mark.slow
def test_each_rank_queues_its_own_buffer_on_its_writer(gloo_dumps: Path) -> None:
    for rank, count in ENTRIES.items():
        sent = json.loads((gloo_dumps / f"rows{rank}.json").read_text())
        assert sent["queued"] == count == len(sent["rows"])
        assert {(r["table"], r["rank"], r["run"]) for r in sent["rows"]} == {
            ("flight_recorder", rank, "gloo-run")}


@pytest.mark.slow
def test_rows_load_into_the_store(gloo_dumps: Path, tmp_path: Path) -> None:
    with Store.connect(f"chdb://{tmp_path / 'store'}") as store:
        for dump in fr.read_folder(gloo_dumps / "pickle"):
            store.insert(fr.TABLE, [{**Identity(run="r").row(), **row} for row in fr.rows(dump)])
        found = store.query(
            "SELECT rank, count(), max(collective_seq_id), any(last_enqueued) FROM "
            "flight_recorder WHERE run = 'r' GROUP BY rank ORDER BY rank").rows
    assert found == [(0, 4, 4, 4), (1, 3, 3, 3)]


def test_a_pickle_naming_a_class_is_refused_unrun(tmp_path: Path) -> None:
    evil = tmp_path / f"{fr.PREFIX}0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "entries": [Path("/x")],
                                   "pg_config": {}}))
    with pytest.raises(fr.FlightRecorderError, match=r"refers to pathlib\..*Path"):
        fr.read_dump(evil)


@pytest.mark.parametrize(("name", "content", "message"), [
    ("comm_lib_trace_rank_0", b"hello", "neither JSON nor a pickle"),
    ("comm_lib_trace_rank_0", b"{\"version\": \"2.10\"}", "entries: expected a list"),
    ("comm_lib_trace_rank_0", b"{\"version\": \"3.0\", \"entries\": [], \"pg_config\": {}}",
     "version '3.0' is not supported"),
    ("trace.json", b"{}", "cannot tell the rank"),
    ("comm_lib_trace_rank_0.json", b"{\"version\": \"2.10\", \"entries\": [{\"pg_id\": 0}], "
                                   b"\"pg_config\": {}}", "entries\\[0\\]: missing"),
])
def test_a_bad_dump_is_named_with_what_is_wrong(tmp_path: Path, name: str, content: bytes,
                                                message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(fr.FlightRecorderError, match=message) as caught:
        fr.rows(fr.read_dump(path))
    assert str(path) in str(caught.value)


PROGRESS = ("retired", "state", "time_started_ns", "time_completed_ns", "duration_ms",
            "last_enqueued", "last_started", "last_completed")


def _fixed(row: Row) -> Row:
    """A row without what changes while a collective completes."""
    return {key: value for key, value in row.items() if key not in PROGRESS}


def _first(dump: fr.Dump, count: int) -> fr.Dump:
    """The dump as it was after its first `count` collectives."""
    data: dict[str, Any] = dict(dump.data)
    data["entries"] = dump.entries[:count]
    data["pg_status"] = {pg: {**status, "last_enqueued_collective": count}
                         for pg, status in data["pg_status"].items()}
    return fr.Dump(dump.source, dump.rank, data)
