"""The input of the security scan (checkov): every manifest a cluster would receive, the
overlays built with the real `kubectl kustomize`, the jobs as Argo CD reads them, plus the
Argo CD Applications and Warden."""

from __future__ import annotations

from pathlib import Path

from generator.errors import ToolFailed
from generator.kustomize import build
from generator.paths import ARGOCD_ROOT, OVERLAYS, WARDEN_PATH
from generator.tree import Tree


def write_scan_input(root: Path, tree: Tree, target: Path) -> list[Path]:
    """Write one YAML file per overlay build and per cluster's jobs, Warden's build and Argo
    CD's files to `target`."""
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for folder in [f for f in tree.kustomizations() if f.startswith(OVERLAYS + "/")]:
        written.append(_build(root / folder, target / f"{Path(folder).name}.yaml"))
        written.append(_jobs(tree, f"{folder}/jobs/", target / f"{Path(folder).name}-jobs.yaml"))
    if (root / WARDEN_PATH / "kustomization.yaml").is_file():
        written.append(_build(root / WARDEN_PATH, target / "warden.yaml"))
    for path, text in sorted(tree.files.items()):
        if path.startswith(ARGOCD_ROOT + "/"):
            out = target / "argocd" / path.removeprefix(ARGOCD_ROOT + "/")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
            written.append(out)
    return written


def _jobs(tree: Tree, folder: str, out: Path) -> Path:
    """The cluster's job files as one stream of documents (Argo CD syncs them unbuilt)."""
    texts = [text for path, text in sorted(tree.files.items()) if path.startswith(folder)]
    out.write_text("\n---\n".join(texts), encoding="utf-8")
    return out


def _build(folder: Path, out: Path) -> Path:
    result = build(folder)
    if result.returncode:
        raise ToolFailed(f"kubectl kustomize {folder} failed: {result.stderr.strip()}")
    out.write_text(result.stdout, encoding="utf-8")
    return out
