"""A planted `.metadata` runs nothing: real DCP checkpoints, real pickles, real gadgets."""

from __future__ import annotations

import builtins
import io
import os
import pickle
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint import metadata as dcp_metadata

from runtime.checkpoint.config import CheckpointConfig
from runtime.checkpoint.manager import Checkpointer
from runtime.checkpoint.metadata import CheckpointMetadataError, load_metadata


class _Gadget:
    """Pickles as a call of `func(*args)`: what a hostile `.metadata` holds."""

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


def _saved(root: Path, uri: str | None = None) -> tuple[Checkpointer, Path]:
    """A real committed checkpoint at step 1 and the path of its `.metadata`."""
    ckpt = Checkpointer(CheckpointConfig(uri=uri or str(root), interval_steps=1))
    ckpt.save(1, {"w": torch.arange(6.0), "extra": {"epoch": 3}})
    ckpt.close()
    return ckpt, root / "step-0000000001" / ".metadata"


def _gadgets(marker: Path) -> dict[str, object]:
    return {
        "os.system": _Gadget(os.system, f"touch {marker}"),
        "subprocess": _Gadget(subprocess.call, ["touch", str(marker)]),
        "exec": _Gadget(builtins.exec, f"open({str(marker)!r}, 'w').close()"),
        "inside-metadata": dcp_metadata.Metadata(
            state_dict_metadata={}, planner_data=_Gadget(os.system, f"touch {marker}")
        ),
    }


@pytest.mark.parametrize("kind", ["os.system", "subprocess", "exec", "inside-metadata"])
def test_a_planted_gadget_is_refused_and_never_runs(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "ran"
    ckpt, meta = _saved(tmp_path / "ckpt")
    meta.write_bytes(pickle.dumps(_gadgets(marker)[kind], protocol=4))
    with pytest.raises(CheckpointMetadataError, match=r"refuses the global") as caught:
        ckpt.load({"w": torch.zeros(6), "extra": {"epoch": 0}})
    assert caught.value.path == str(meta)
    assert str(meta) in str(caught.value)
    assert not marker.exists()


def test_a_gadget_behind_a_url_is_refused_too(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    root = tmp_path / "remote"
    ckpt, meta = _saved(root, uri=f"file://{root}")
    meta.write_bytes(pickle.dumps(_Gadget(os.system, f"touch {marker}")))
    with pytest.raises(CheckpointMetadataError, match=r"posix\.system"):
        ckpt.load({"w": torch.zeros(6), "extra": {"epoch": 0}})
    assert not marker.exists()


def test_a_real_checkpoint_loads_through_the_restricted_reader(tmp_path: Path) -> None:
    ckpt, meta = _saved(tmp_path / "ckpt")
    state = {"w": torch.zeros(6), "extra": {"epoch": 0}}
    assert ckpt.load(state) == 1
    assert torch.equal(state["w"], torch.arange(6.0)) and state["extra"] == {"epoch": 3}
    # Every field, as plain pickle reads it (the file is trusted in this test only).
    with meta.open("rb") as plain, meta.open("rb") as safe:
        want, got = pickle.load(plain), load_metadata(safe, str(meta))
    assert got == want


def _class_attribute_setter() -> bytes:
    """BUILD on an allowed class itself: sets StorageMeta.save_id (a class attribute)."""
    head = pickle.dumps(dcp_metadata.StorageMeta, protocol=2)[:-1]  # PROTO and the GLOBAL
    name = b"save_id"
    # None, {name: "planted"}, TUPLE2, BUILD: (state, slotstate) goes through setattr.
    slots = b"}X" + len(name).to_bytes(4, "little") + name + b"X\x07\x00\x00\x00planteds"
    return head + b"N" + slots + b"\x86b."


def test_setting_attributes_of_a_metadata_class_is_refused_and_undone() -> None:
    before = vars(dcp_metadata.StorageMeta)["save_id"]
    with pytest.raises(CheckpointMetadataError, match="changes attributes"):
        load_metadata(io.BytesIO(_class_attribute_setter()), "planted/.metadata")
    assert vars(dcp_metadata.StorageMeta)["save_id"] is before


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (pickle.dumps({"state_dict_metadata": {}}), "holds a dict"),
        (pickle.dumps(7), "holds a int"),
        (b"", "not a readable DCP metadata pickle"),
        (b"\x80\x04not a pickle", "not a readable DCP metadata pickle"),
        (b"\x80\x02X\x01\x00\x00\x00aQ.", "persistent id"),
        (pickle.dumps(dcp_metadata.Metadata(state_dict_metadata=[])), "is not a dict"),
        (b"\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xff", "OverflowError"),  # by hypothesis
    ],
    ids=["dict", "int", "empty", "garbage", "persistent-id", "wrong-field", "huge-frame"],
)
def test_what_is_not_metadata_is_refused(body: bytes, says: str) -> None:
    with pytest.raises(CheckpointMetadataError, match=says):
        load_metadata(io.BytesIO(body), "planted/.metadata")


def test_a_missing_metadata_is_refused_before_dcp_tries_rank_files(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ckpt, meta = _saved(tmp_path / "ckpt")
    meta.unlink()
    (meta.parent / "__0.metadata").write_bytes(pickle.dumps(_Gadget(os.system, f"touch {marker}")))
    with pytest.raises(CheckpointMetadataError, match="cannot be read"):
        ckpt.load({"w": torch.zeros(6), "extra": {"epoch": 0}})
    assert not marker.exists()


@pytest.fixture(scope="module")
def valid_pickle(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    _, meta = _saved(tmp_path_factory.mktemp("fuzz") / "ckpt")
    return meta.read_bytes()


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_metadata_loads_or_is_refused(valid_pickle: bytes, data: st.DataObject) -> None:
    body = bytearray(valid_pickle)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(1, len(body)))
    try:
        got = load_metadata(io.BytesIO(bytes(body[:cut])), "fuzz/.metadata")
    except CheckpointMetadataError:
        return
    assert isinstance(got, dcp_metadata.Metadata)
