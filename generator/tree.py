"""The rendered tree: every generated file of the repository, held in memory until written
(`generator.output`), and what producers of files receive (`RenderContext`).

A render after few changes takes most jobs from the render cache, and writing or comparing
the tree needs only their text. Their documents and resolved jobs, which only checks read,
are loaded when first asked for (`Manifests`, `RenderedJob`), so this module imports nothing
heavy: `gkr render` with nothing to render starts fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, MutableMapping, MutableSequence, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, overload

from generator.errors import InvalidInput, Problem
from generator.paths import HEADER

if TYPE_CHECKING:
    from generator.catalog import Catalog
    from generator.resolve import ResolvedJob

Documents = list[dict[str, Any]]


class Deferred(Protocol):
    """A file a catalog producer leaves to be finished from the rendered jobs."""

    @property
    def source(self) -> str: ...

    def documents(self, jobs: Sequence[RenderedJob]) -> Documents: ...


@dataclass(frozen=True)
class RenderedJob:
    """One job's output file. Its resolved job and documents come from `details`: at hand for
    a job rendered in this run, read from the cache (or rendered again) for a cached one."""

    path: str
    text: str
    source: str
    details: Callable[[], tuple[ResolvedJob, Documents]]
    images: tuple[str, ...] = ()  # the images its pods name (read without its documents)

    @cached_property
    def _details(self) -> tuple[ResolvedJob, Documents]:
        return self.details()

    @property
    def job(self) -> ResolvedJob:
        return self._details[0]

    @property
    def documents(self) -> Documents:
        return self._details[1]


class Jobs(MutableSequence["ResolvedJob"]):
    """Resolved jobs in render order. A cached job's is rebuilt when first read, so counting
    jobs costs nothing."""

    def __init__(self, items: Iterable[ResolvedJob | RenderedJob] = ()) -> None:
        self._items: list[ResolvedJob | RenderedJob] = list(items)

    def _resolved(self, index: int) -> ResolvedJob:
        item = self._items[index]
        if isinstance(item, RenderedJob):
            item = self._items[index] = item.job
        return item

    @overload
    def __getitem__(self, index: int) -> ResolvedJob: ...
    @overload
    def __getitem__(self, index: slice) -> Jobs: ...
    def __getitem__(self, index: int | slice) -> ResolvedJob | Jobs:
        if isinstance(index, slice):
            return Jobs(self._resolved(i) for i in range(len(self._items))[index])
        return self._resolved(index)

    @overload
    def __setitem__(self, index: int, value: ResolvedJob) -> None: ...
    @overload
    def __setitem__(self, index: slice, value: Iterable[ResolvedJob]) -> None: ...
    def __setitem__(self, index: int | slice, value: Any) -> None:
        self._items[index] = value

    def __delitem__(self, index: int | slice) -> None:
        del self._items[index]

    def __len__(self) -> int:
        return len(self._items)

    def insert(self, index: int, value: ResolvedJob | RenderedJob) -> None:
        self._items.insert(index, value)


class Manifests(MutableMapping[str, Documents]):
    """Documents by file path, in the order added; a `later` entry is loaded when first read."""

    def __init__(self) -> None:
        self._items: dict[str, Documents | Callable[[], Documents]] = {}

    def later(self, path: str, load: Callable[[], Documents]) -> None:
        self._items[path] = load

    def __getitem__(self, path: str) -> Documents:
        value = self._items[path]
        if callable(value):
            value = self._items[path] = value()
        return value

    def __setitem__(self, path: str, documents: Documents) -> None:
        self._items[path] = documents

    def __delitem__(self, path: str) -> None:
        del self._items[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class Tree:
    """Generated files (repo-relative POSIX path → text) and the manifests behind them."""

    files: dict[str, str] = field(default_factory=dict)
    manifests: MutableMapping[str, Documents] = field(default_factory=Manifests)
    jobs: MutableSequence[ResolvedJob] = field(default_factory=Jobs)
    # Files that depend on the jobs, by path, from producers that see none (render_tree
    # completes them once every job is rendered).
    deferred: dict[str, Deferred] = field(default_factory=dict)

    def add(self, path: str, documents: Documents, source: str, text: str | None = None) -> None:
        """Add a YAML file of manifests (`text` when already serialised)."""
        from generator.yamlio import dump_documents

        self._claim(path, source)
        self.manifests[path] = documents
        self.files[path] = text or HEADER.format(source=source) + dump_documents(documents)

    def add_job(self, rendered: RenderedJob) -> None:
        """Add a job's file; its documents are read only if someone asks for them."""
        self._claim(rendered.path, rendered.source)
        if isinstance(self.manifests, Manifests):
            self.manifests.later(rendered.path, lambda: rendered.documents)
        else:
            self.manifests[rendered.path] = rendered.documents
        self.files[rendered.path] = rendered.text
        if isinstance(self.jobs, Jobs):
            self.jobs.insert(len(self.jobs), rendered)
        else:
            self.jobs.append(rendered.job)

    def _claim(self, path: str, source: str) -> None:
        if path in self.files:
            raise InvalidInput([Problem(source, None, "name", f"renders to {path}, "
                                        "which another spec also renders to")])

    def kustomizations(self) -> list[str]:
        """Folders of the tree that hold a kustomization (overlays, base, components)."""
        return sorted(p.rsplit("/", 1)[0] for p in self.files if p.endswith("/kustomization.yaml"))


@dataclass(frozen=True)
class RenderContext:
    root: Path
    catalog: Catalog
    rendered: list[RenderedJob]

    @property
    def jobs(self) -> list[ResolvedJob]:
        return [rendered.job for rendered in self.rendered]


Producer = Callable[[RenderContext, Tree], None]
