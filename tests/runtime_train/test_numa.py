"""NUMA affinity from the GPU's PCI device, against a fake sysfs tree (two nodes, two GPUs)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import types
from pathlib import Path

import pytest

from runtime.train import numa
from runtime.train.numa import choose_affinity, pin_to_numa_node

ALL = set(range(8))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _pci(root: Path, bus_id: str, vendor: str, kind: str, node: int) -> None:
    device = root / "bus/pci/devices" / bus_id
    _write(device / "vendor", vendor)
    _write(device / "class", kind)
    _write(device / "numa_node", str(node))


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """Node 0: CPUs 0-3, node 1: CPUs 4-7. GPU 0 (bus 0000:3b) sits on node 1, GPU 1 (bus
    0000:86) on node 0; a NIC and an NVIDIA audio function must not count as GPUs."""
    _write(tmp_path / "devices/system/node/node0/cpulist", "0-3")
    _write(tmp_path / "devices/system/node/node1/cpulist", "4-7")
    _pci(tmp_path, "0000:86:00.0", "0x10de", "0x030200", 0)
    _pci(tmp_path, "0000:3b:00.0", "0x10de", "0x030200", 1)
    _pci(tmp_path, "0000:3b:00.1", "0x10de", "0x040300", 1)  # audio function of a GPU
    _pci(tmp_path, "0000:1a:00.0", "0x15b3", "0x020000", 0)  # a NIC
    return tmp_path


def test_a_gpu_rank_runs_on_its_gpus_numa_node_not_its_rank_modulo(sysfs: Path) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    first = choose_affinity(0, ALL, env, sysfs)
    second = choose_affinity(1, ALL, env, sysfs)
    assert first.cpus == [4, 5, 6, 7] and "0000:3b:00.0" in first.reason  # rank 0 % 2 = node 0
    assert second.cpus == [0, 1, 2, 3] and "NUMA node 0" in second.reason


def test_a_worker_given_only_its_own_gpu_uses_that_gpu(sysfs: Path) -> None:
    assert choose_affinity(3, ALL, {"CUDA_VISIBLE_DEVICES": "1"}, sysfs).cpus == [0, 1, 2, 3]


def test_cpus_outside_the_allowed_set_are_left_out(sysfs: Path) -> None:
    assert choose_affinity(0, {0, 5, 6}, {"CUDA_VISIBLE_DEVICES": "0"}, sysfs).cpus == [5, 6]
    blocked = choose_affinity(0, {0, 1}, {"CUDA_VISIBLE_DEVICES": "0"}, sysfs)
    assert blocked.cpus is None and "none of its CPUs is allowed" in blocked.reason


def test_unknown_numa_node_falls_back_with_the_reason(sysfs: Path) -> None:
    _write(sysfs / "bus/pci/devices/0000:3b:00.0/numa_node", "-1")
    affinity = choose_affinity(0, ALL, {"CUDA_VISIBLE_DEVICES": "0"}, sysfs)
    assert affinity.cpus is None and "reports no NUMA node" in affinity.reason


def test_a_uuid_without_nvml_falls_back_with_the_reason(sysfs: Path) -> None:
    affinity = choose_affinity(0, ALL, {"CUDA_VISIBLE_DEVICES": "GPU-1234"}, sysfs)
    assert affinity.cpus is None and "NVML (pynvml) is not installed" in affinity.reason


def test_nvml_names_the_pci_device_when_present(
    sysfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVML resolves a UUID; its 8-digit domain is matched to sysfs's 4-digit one."""
    fake = types.ModuleType("pynvml")
    handles = {"GPU-aaaa": "h0"}
    fake.nvmlInit = fake.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByUUID = handles.__getitem__  # type: ignore[attr-defined]
    fake.nvmlDeviceGetPciInfo = lambda handle: types.SimpleNamespace(  # type: ignore[attr-defined]
        busId=b"00000000:86:00.0"
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    affinity = choose_affinity(0, ALL, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, sysfs)
    assert affinity.cpus == [0, 1, 2, 3] and "from NVML" in affinity.reason


def test_cpu_ranks_keep_the_local_rank_modulo_nodes(sysfs: Path) -> None:
    assert choose_affinity(1, ALL, {}, sysfs).cpus == [4, 5, 6, 7]
    assert "no GPU" in choose_affinity(1, ALL, {}, sysfs).reason


def test_one_node_leaves_the_affinity_alone(tmp_path: Path) -> None:
    _write(tmp_path / "devices/system/node/node0/cpulist", "0-7")
    assert choose_affinity(0, ALL, {"CUDA_VISIBLE_DEVICES": "0"}, tmp_path).cpus is None


def _pin_in_child(sysfs: str, out: multiprocessing.Queue) -> None:
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    pin_to_numa_node(0, Path(sysfs))
    out.put(sorted(os.sched_getaffinity(0)))


def test_pinning_applies_the_chosen_cpus_in_the_process(tmp_path: Path) -> None:
    """In a child process (the test runner keeps its own affinity): the GPU's node holds
    one of the CPUs this machine allows, the other node the rest."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two allowed CPUs")
    _write(tmp_path / "devices/system/node/node0/cpulist", ",".join(map(str, allowed[1:])))
    _write(tmp_path / "devices/system/node/node1/cpulist", str(allowed[0]))
    _pci(tmp_path, "0000:3b:00.0", "0x10de", "0x030200", 1)
    forks = multiprocessing.get_context("fork")
    out = forks.Queue()
    child = forks.Process(target=_pin_in_child, args=(str(tmp_path), out))
    child.start()
    child.join(60)
    assert out.get(timeout=5) == [allowed[0]]


def test_a_gpu_fallback_is_logged_as_a_warning(
    sysfs: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    with caplog.at_level(logging.INFO, logger=numa.__name__):
        affinity = pin_to_numa_node(0, sysfs)
    assert affinity.cpus is None
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "not among the 2 NVIDIA PCI devices" in (
        record.getMessage()
    )
