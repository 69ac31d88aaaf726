"""The preflight suite run for real on this machine (gloo collectives across 2 processes, the
live kernel log where readable) plus recorded kernel-log samples with real Xid lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.preflight import (
    MountExpectation,
    PreflightConfig,
    kernel,
    libraries,
    mounts,
    run_suite,
    transport,
)
from runtime.preflight.config import load_config

DATA = Path(__file__).with_name("data")


def test_recorded_faulty_log_is_classified():
    faults = kernel.scan((DATA / "kernel_faulty_node.log").read_text().splitlines())
    names = [f.name.split(" ")[0] for f in faults]
    assert names == [
        "pcie-aer-corrected", "pcie-aer-corrected", "xid-79", "gpu-off-bus", "xid-48", "xid-63",
        "xid-74", "nvswitch-sxid", "nvswitch-sxid-fatal", "xid-13", "host-ecc-corrected",
        "host-ecc-uncorrected", "oom-kill", "pcie-aer-fatal",
    ]
    by_name = {f.name.split(" ")[0]: f for f in faults}
    assert by_name["xid-79"].category == "pcie" and by_name["xid-79"].severity == "error"
    assert by_name["xid-48"].category == "ecc" and by_name["xid-48"].severity == "error"
    assert by_name["xid-74"].category == "nvlink"
    assert by_name["xid-13"].severity == "warning"  # usually the application, not the node
    assert by_name["oom-kill"].category == "oom"
    assert "PCI:0000:44:00" in by_name["xid-79"].name


def test_recorded_healthy_log_passes_and_unknown_xid_is_a_warning():
    assert kernel.scan((DATA / "kernel_healthy_node.log").read_text().splitlines()) == []
    fault = kernel.classify("NVRM: Xid (PCI:0000:01:00): 9999, pid=1, name=x, something new")
    assert fault is not None and fault.severity == "warning" and "unlisted" in fault.name


def test_kernel_check_reports_every_fault_and_unreadable_logs(tmp_path):
    findings = kernel.check(str(DATA / "kernel_faulty_node.log"))
    assert sum(f.severity == "error" for f in findings) == 7
    missing = kernel.check(str(tmp_path / "absent.log"))
    assert missing[0].severity == "warning" and "unreadable" in missing[0].message


def test_live_kernel_log_is_read_where_permitted():
    try:
        lines = kernel.read_live()
    except OSError as error:
        pytest.skip(f"kernel log not readable here: {error}")
    assert lines and all(isinstance(line, str) for line in lines)


def test_transport_variables_against_the_catalog():
    config = PreflightConfig(transport_env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring"})
    good = transport.check(config, {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring"})
    assert [f.severity for f in good] == ["ok"]
    bad = transport.check(config, {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "INFO"})
    messages = " ".join(f.message for f in bad)
    assert "NCCL_ALGO is unset" in messages and "NCCL_SOCKET_IFNAME='eth1'" in messages
    assert bad[-1].severity == "warning" and "NCCL_DEBUG" in bad[-1].message


def test_plugin_paths_and_gpu_libraries(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "libnccl-net.so").write_bytes(b"")
    config = PreflightConfig(gpus=8, plugin_paths=[str(tmp_path / "plugins"),
                                                   str(tmp_path / "empty"), "/nonexistent"])
    findings = libraries.check(config)

    def severity(text: str) -> str:
        return next(f.severity for f in findings if text in f.message)

    assert severity(f"{tmp_path / 'plugins'}: 1 libraries") == "ok"
    assert severity(f"{tmp_path / 'empty'} holds no shared libraries") == "error"
    assert severity("/nonexistent is missing") == "error"
    # No NVIDIA driver on this machine: a GPU pod without libcuda must fail.
    assert severity("libcuda.so.1") == ("ok" if os.path.exists("/dev/nvidia0") else "error")


def test_mounts_present_writable_and_filesystem(tmp_path):
    shm_kind = mounts.filesystem_of("/dev/shm")
    config = PreflightConfig(mounts=[
        MountExpectation(path="/dev/shm", filesystem=shm_kind),
        MountExpectation(path=str(tmp_path), filesystem="no-such-fs"),
        MountExpectation(path="/proc", writable=True),
        MountExpectation(path="/missing/mount"),
    ])
    severities = [f.severity for f in mounts.check(config)]
    assert severities == ["ok", "error", "error", "error"]


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="gpus"):
        load_config('{"gpus": -1}', "$GKR_PREFLIGHT")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config("{", "$GKR_PREFLIGHT")
    with pytest.raises(ConfigError, match="checks"):
        load_config('{"checks": ["nope"]}', "x")


def test_suite_without_collective_flags_a_faulty_node():
    config = PreflightConfig(node="n1", kernel_log=str(DATA / "kernel_faulty_node.log"),
                             checks=["kernel", "compute"], compute_size=64)
    result = run_suite(config)
    assert not result.passed and result.node == "n1"
    assert any(f.check == "compute" and f.severity == "ok" for f in result.findings)
    assert result.figures["compute.cpu.gflops"] > 0


@pytest.mark.slow
def test_module_runs_the_whole_suite_with_gloo_across_two_processes(tmp_path):
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"node": "local", "collective_mib": 1,
                                  "transport_env": {"NCCL_PROTO": "Simple"},
                                  "mounts": [{"path": str(tmp_path)}]}))
    env = {**os.environ, "NCCL_PROTO": "Simple"}
    done = subprocess.run([sys.executable, "-m", "runtime.preflight", "--expect", str(expect)],
                          capture_output=True, text=True, timeout=300, env=env)
    result = json.loads(done.stdout)
    assert done.returncode == (0 if result["passed"] else 1)
    collective = [f for f in result["findings"] if f["check"] == "collective"]
    assert [f["severity"] for f in collective] == ["ok", "ok"], collective
    assert result["figures"]["collective.all_reduce.busbw_gbps"] > 0
    assert {f["check"] for f in result["findings"]} == {
        "kernel", "libraries", "transport", "mounts", "compute", "collective"}
