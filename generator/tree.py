"""The rendered tree: every generated file of the repository, held in memory until written
(`generator.output`), and what producers of files receive (`RenderContext`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.catalog import Catalog
from generator.errors import InvalidInput, Problem
from generator.paths import HEADER
from generator.resolve import ResolvedJob
from generator.yamlio import dump_documents


@dataclass
class Tree:
    """Generated files (repo-relative POSIX path → text) and the manifests behind them."""

    files: dict[str, str] = field(default_factory=dict)
    manifests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    jobs: list[ResolvedJob] = field(default_factory=list)

    def add(
        self, path: str, documents: list[dict[str, Any]], source: str, text: str | None = None
    ) -> None:
        """Add a YAML file of manifests (`text` when already serialised)."""
        if path in self.files:
            raise InvalidInput([Problem(source, None, "name", f"renders to {path}, "
                                        "which another spec also renders to")])
        self.manifests[path] = documents
        self.files[path] = text or HEADER.format(source=source) + dump_documents(documents)

    def kustomizations(self) -> list[str]:
        """Folders of the tree that hold a kustomization (overlays, base, components)."""
        return sorted(p.rsplit("/", 1)[0] for p in self.files if p.endswith("/kustomization.yaml"))


@dataclass(frozen=True)
class RenderedJob:
    job: ResolvedJob
    path: str
    documents: list[dict[str, Any]]
    text: str


@dataclass(frozen=True)
class RenderContext:
    root: Path
    catalog: Catalog
    rendered: list[RenderedJob]

    @property
    def jobs(self) -> list[ResolvedJob]:
        return [rendered.job for rendered in self.rendered]


Producer = Callable[[RenderContext, Tree], None]


