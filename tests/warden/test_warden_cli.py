"""`gkr warden status` and `gkr warden history` read a real Temporal dev server.

Node annotations come from the Kubernetes API test double (no API server runs here).
"""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from typer.testing import CliRunner

from generator.cli import app, main
from runtime.warden.model import Trigger
from runtime.warden.triggers import trigger_node
from testing.warden import gpu_node
from tests.warden.conftest import RunningWorker, fast_config
from tests.warden.test_warden_flow import result

pytestmark = pytest.mark.slow


def test_status_and_history_show_phases_incidents_and_memory(loop, temporal, doubles, tmp_path):
    kube, _, _ = doubles
    kube.put(gpu_node("gpu-cli"))
    config = fast_config(temporal, doubles, tmp_path)
    worker = RunningWorker(loop, temporal, config, sweeps=False)
    try:
        loop.run(trigger_node(temporal.client, config, "gpu-cli", Trigger("fault", "Xid 79")))
        assert result(loop, temporal, "gpu-cli").phase == "healthy"
    finally:
        worker.stop()
    address = config.temporal.address
    kubeconfig = config.kubernetes.kubeconfig
    runner = CliRunner()

    shown = runner.invoke(app, ["warden", "status", "--address", address,
                                "--kubeconfig", kubeconfig, "-o", "json"])
    assert shown.exit_code == 0, shown.output
    row = next(r for r in json.loads(shown.output) if r["node"] == "gpu-cli")
    assert (row["phase"], row["status"], row["recent_cordons"]) == ("healthy", "COMPLETED", "1")

    past = runner.invoke(app, ["warden", "history", "gpu-cli", "--address", address,
                               "--kubeconfig", kubeconfig, "-o", "yaml"])
    assert past.exit_code == 0, past.output
    incident, annotations = yaml.safe_load(past.output)
    assert incident["reason"] == "Xid 79" and incident["phase"] == "healthy"
    assert any("reboot requested" in step["what"] for step in incident["steps"])
    assert annotations["state"] == "healthy" and annotations["cordoned"] is False

    table = runner.invoke(app, ["warden", "history", "gpu-cli", "--address", address])
    assert table.exit_code == 0 and "Xid 79" in table.output


def test_unreachable_temporal_is_a_message_not_a_traceback(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["gkr", "warden", "status", "--address", "127.0.0.1:1"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 4
    assert "cannot reach Temporal at 127.0.0.1:1" in capsys.readouterr().err
