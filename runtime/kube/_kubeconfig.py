"""The current kubeconfig context, read as kubectl reads it, without importing `kubernetes`:
`gkr` takes its default cluster and namespace from it, as kubectl-ray does."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Context:
    """A kubeconfig context: its name and its namespace (None when it names none)."""

    name: str
    namespace: str | None


def kubeconfig_files(kubeconfig: str | None = None) -> list[Path]:
    """`kubeconfig`, else the files of $KUBECONFIG (a path list), else ~/.kube/config."""
    listed = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return [Path(part).expanduser() for part in listed.split(os.pathsep) if part]


def current_context(kubeconfig: str | None = None) -> Context | None:
    """kubectl's merge rules: the first file that sets `current-context` names it, the first
    file that defines that context gives its namespace. None when nothing usable is set."""
    configs = [_read(path) for path in kubeconfig_files(kubeconfig)]
    name = next((c["current-context"] for c in configs
                 if isinstance(c.get("current-context"), str) and c["current-context"]), None)
    if name is None:
        return None
    for config in configs:
        for entry in config.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                namespace = (entry.get("context") or {}).get("namespace")
                return Context(name, namespace if isinstance(namespace, str) else None)
    return Context(name, None)


def _read(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # a default, never a failure
        return {}
    return data if isinstance(data, dict) else {}
