"""`render_tree`, one straight line: catalog + specs → resolved jobs → manifests → files.

Nothing touches the disk here but the render cache (`generator.output` writes the tree). The
cache keeps every job's output file and the files the catalog alone decides, so a render
after a one-spec change renders one spec, and a render after none renders nothing. The
renderer's own modules (catalog models, templates, platform producers) are imported only
when something must be rendered: importing them takes longer than a cached render.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from generator.cache import (
    Details,
    RenderCache,
    Summary,
    digest,
    file_digest,
    read_own,
    store_details,
)
from generator.errors import BadRequest, InvalidInput, Problem
from generator.lock import tree_lock
from generator.paths import HEADER, component_dir, overlay_dir
from generator.tree import Deferred, Documents, RenderContext, RenderedJob, Tree

if TYPE_CHECKING:
    from generator.catalog import Catalog
    from generator.resolve import ResolvedJob

# Below this many uncached specs, rendering in one process beats starting workers.
PARALLEL_THRESHOLD = 200
CACHE_WAIT_S = 2.0
CatalogOf = Callable[[], "Catalog"]


@dataclass(frozen=True)
class Fresh:
    """A spec rendered in this run: what the cache keeps of it, and its resolved job unless a
    worker process rendered it (catalog objects are not sent back; they are rebuilt). A
    worker that has a cache writes the details there itself, sending back only the summary:
    the parent of a cold render is its bottleneck, and documents are the bulk of a result."""

    summary: Summary
    details: Details | None
    jobs: tuple[ResolvedJob, ...] | None  # the spec's job, then any others it renders to


@dataclass(frozen=True)
class CatalogPart:
    """The files the catalog alone decides, and the components each overlay includes."""

    files: dict[str, str]
    manifests: dict[str, Documents]
    overlays: dict[str, list[str]]
    deferred: dict[str, Deferred]  # finished from the jobs (Tree.deferred)


def render_tree(root: Path, catalog: Catalog | None = None, use_cache: bool = True) -> Tree:
    """Render everything in memory; the cache (if used) is saved only after success."""
    render_cache = RenderCache(root) if use_cache else None
    catalog_of = cache(lambda: catalog or _new_catalog(root))
    part_of = cache(lambda: _catalog_part(root, catalog_of, render_cache))
    rendered = render_jobs(root, catalog_of, render_cache, meanwhile=part_of)
    part = part_of()
    tree = Tree()
    for path, text in part.files.items():
        tree.files[path] = text
        if path in part.manifests:
            tree.manifests[path] = part.manifests[path]
    for job in rendered:
        tree.add_job(job)
    for path, deferred in part.deferred.items():
        tree.add(path, deferred.documents(rendered), deferred.source)
    _add_kustomizations(tree, part.overlays, render_cache)
    if render_cache:
        _save(root, render_cache)
    return tree


def _save(root: Path, render_cache: RenderCache) -> None:
    """Save under the tree's lock, but wait little: the cache is disposable, and a render
    that cannot save it (a read-only checkout, a long write by another gkr) still renders."""
    try:
        with tree_lock(root, wait_s=CACHE_WAIT_S, reading=True) as held:
            if held:
                render_cache.save()
    except BadRequest:  # busy, or no lock to be had
        return


def _new_catalog(root: Path) -> Catalog:
    from generator.catalog import Catalog

    return Catalog(root)


def spec_key(path: Path) -> str | None:
    """A spec's cache key: its path and bytes (None for a link, which is never cached)."""
    data = read_own(path)
    return digest(path.as_posix().encode(), data) if data is not None else None


def render_jobs(root: Path, catalog_of: CatalogOf, render_cache: RenderCache | None,
                meanwhile: Callable[[], object] = lambda: None) -> list[RenderedJob]:
    """Resolve and render every spec under jobs/; reports the problems of all specs at once.

    Cached specs cost a lookup; the others are rendered, on every core when there are many
    (a cold render of a large repository is CPU-bound Python). While workers render, this
    process does `meanwhile`."""
    from generator.placement import spec_files

    paths = spec_files(root)
    keys = [spec_key(path) for path in paths]
    cached = {k: s for k in keys if k and render_cache and (s := render_cache.get(k))}
    missing = [(p, k) for p, k in zip(paths, keys, strict=True) if k not in cached]
    outcomes: list[Fresh | list[Problem]] = []
    if missing:
        with _without_pydantic_plugins():
            outcomes = _render_all(missing, root, catalog_of, render_cache, meanwhile)
    problems = [p for outcome in outcomes if isinstance(outcome, list) for p in outcome]
    if problems:
        raise InvalidInput(problems)
    fresh = {p: made for (p, _), made in zip(missing, outcomes, strict=True)
             if isinstance(made, Fresh)}
    for path, key in missing:
        if render_cache and key:
            render_cache.put(key, fresh[path].summary, fresh[path].details)
    return [job for path, key in zip(paths, keys, strict=True)
            for job in _rendered(path, root, key, fresh.get(path), cached.get(key or ""),
                                 catalog_of, render_cache)]


@contextmanager
def _without_pydantic_plugins() -> Iterator[None]:
    """pydantic looks for plugins (the entry points of every installed distribution, ~10 ms)
    when it builds its first model, and gkr's models use none. As typer does around its own
    pydantic adapters, the lookup is off while the renderer's models are imported and used,
    unless PYDANTIC_DISABLE_PLUGINS is set already."""
    if "PYDANTIC_DISABLE_PLUGINS" in os.environ:
        yield
        return
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        yield
    finally:
        os.environ.pop("PYDANTIC_DISABLE_PLUGINS", None)


def _rendered(path: Path, root: Path, key: str | None, made: Fresh | None,
              summary: Summary | None, catalog_of: CatalogOf,
              render_cache: RenderCache | None) -> list[RenderedJob]:
    """A spec's output files, one per job; resolved jobs and documents are rebuilt only
    when asked for."""
    summary = made.summary if made else summary
    assert summary is not None

    def details(part: int) -> tuple[ResolvedJob, Documents]:
        if made and made.jobs and made.details:
            return made.jobs[part], _documents(made.details, part)
        kept = made.details if made and made.details else None
        if kept is None and render_cache and key:
            kept = render_cache.details(key)
        if kept is None:  # the cache lost this spec's details: render it again
            return _rerender(path, root, catalog_of(), part)
        from generator.experiments import assemble_all

        jobs = assemble_all(kept.spec, kept.team, summary.source, kept.user_env, catalog_of())
        return jobs[part], _documents(kept, part)

    files = [(summary.path, summary.text), *summary.parts]
    return [RenderedJob(file, text, summary.source, partial(details, part), summary.images[part])
            for part, (file, text) in enumerate(files)]


def _documents(details: Details, part: int) -> Documents:
    return details.parts[part - 1] if part else details.documents


def _rerender(path: Path, root: Path, catalog: Catalog,
              part: int) -> tuple[ResolvedJob, Documents]:
    made = _render_spec(path, root, catalog)
    if isinstance(made, list):
        raise InvalidInput(made)
    assert made.jobs is not None and made.details is not None
    return made.jobs[part], _documents(made.details, part)


def _render_all(missing: list[tuple[Path, str | None]], root: Path, catalog_of: CatalogOf,
                render_cache: RenderCache | None, meanwhile: Callable[[], object],
                ) -> list[Fresh | list[Problem]]:
    catalog = catalog_of()
    workers = min(os.cpu_count() or 1, len(missing) // (PARALLEL_THRESHOLD // 2))
    if len(missing) < PARALLEL_THRESHOLD or workers < 2:
        return [_render_spec(path, root, catalog) for path, _ in missing]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    catalog.load_all()  # forked workers inherit the parsed catalog
    folder = render_cache.folder if render_cache else None
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                             initializer=_adopt, initargs=(root, catalog, folder)) as pool:
        results = pool.map(_render_in_worker, missing, chunksize=32)  # submits everything
        meanwhile()
        return list(results)


_WORKER: tuple[Path, Catalog, Path | None] | None = None


def _adopt(root: Path, catalog: Catalog, cache_folder: Path | None) -> None:
    from runtime.procs import die_with_parent  # here: `gkr` starts without multiprocessing

    global _WORKER
    die_with_parent()  # a SIGKILLed render left its idle workers running for ever
    _WORKER = (root, catalog, cache_folder)


def _render_in_worker(item: tuple[Path, str | None]) -> Fresh | list[Problem]:
    assert _WORKER is not None
    (path, key), (root, catalog, cache_folder) = item, _WORKER
    made = _render_spec(path, root, catalog)
    if isinstance(made, list):
        return made
    if cache_folder and key and made.details:
        store_details(cache_folder, key, made.details)
        return Fresh(made.summary, None, None)
    return Fresh(made.summary, made.details, None)


def _render_spec(path: Path, root: Path, catalog: Catalog) -> Fresh | list[Problem]:
    """One spec rendered from scratch, as a cache entry (or its problems)."""
    from generator.experiments import resolve_all
    from generator.manifests import render_job
    from generator.paths import job_path
    from generator.policies import pod_images
    from generator.specs import load_spec
    from generator.yamlio import dump_documents

    try:
        loaded = load_spec(path, root)
        jobs = resolve_all(loaded, catalog)  # a DiLoCo experiment renders to several
        documents = [render_job(job) for job in jobs]  # refuses objects too large for the API
    except InvalidInput as error:
        return error.problems
    job = jobs[0]
    texts = [HEADER.format(source=job.source) + dump_documents(docs) for docs in documents]
    env_file = path.parent / job.spec.env_file if job.spec.env_file else None
    dependencies = {str(env_file): file_digest(env_file)} if env_file else {}
    parts = tuple((job_path(other), text) for other, text in zip(jobs[1:], texts[1:], strict=True))
    images = tuple(pod_images(docs) for docs in documents)
    summary = Summary(job_path(job), texts[0], job.source, dependencies, parts, images)
    details = Details(loaded.spec, loaded.source.team, job.user_env, documents[0],
                      tuple(documents[1:]))
    return Fresh(summary, details, tuple(jobs))


def produce_base(ctx: RenderContext, tree: Tree) -> None:
    """Cluster-wide objects every overlay shares: the two priority tiers (seed §4.2)."""
    from generator.manifests import render_documents

    priorities = ctx.catalog.platform.priorities
    documents = render_documents("base/priorities.yaml.j2", priorities=priorities)
    tree.add("kustomize/base/priorities.yaml", documents, "platform/catalog/gke.yaml")


def catalog_producers() -> list[Callable[[RenderContext, Tree], None]]:
    """Producers of the files the catalog alone decides. They see no jobs (`ctx.rendered` is
    empty): their output is cached by the catalog's fingerprint, not by any spec."""
    from generator.platform import produce_platform

    return [produce_base, produce_platform]


def _catalog_part(root: Path, catalog_of: CatalogOf,
                  render_cache: RenderCache | None) -> CatalogPart:
    found = render_cache.catalog_part() if render_cache else None
    if isinstance(found, CatalogPart):
        return found
    catalog = catalog_of()
    tree = Tree()
    for produce in catalog_producers():
        produce(RenderContext(root, catalog, []), tree)
    overlays = {overlay_dir(name): [
        os.path.relpath(component_dir(accelerator), overlay_dir(name))
        for accelerator in sorted(cluster.accelerators)
        if f"{component_dir(accelerator)}/kustomization.yaml" in tree.files
    ] for name, cluster in catalog.clusters.items()}
    part = CatalogPart(tree.files, dict(tree.manifests), overlays, tree.deferred)
    if render_cache:
        render_cache.put_catalog_part(part)
    return part


def _add_kustomizations(tree: Tree, overlays: dict[str, list[str]],
                        render_cache: RenderCache | None = None) -> None:
    """kustomization.yaml files derived from the files present: nothing to keep in sync.
    The cache keeps their text by what they list (they change only when jobs come or go)."""
    folders: dict[str, tuple[list[str], list[str]]] = {"kustomize/base": ([], [])}
    folders |= {folder: (["../../base"], components) for folder, components in overlays.items()}
    for folder, (resources, components) in folders.items():
        resources = resources + sorted(
            path.removeprefix(folder + "/") for path in tree.files
            if path.startswith(folder + "/") and not path.endswith("kustomization.yaml")
            and not path.startswith(folder + "/jobs/")  # synced as plain manifests (paths.py)
        )
        key = digest(str(len(resources)).encode(),
                     *(item.encode() for item in (*resources, *components)))
        text = render_cache.kustomization(key) if render_cache else None
        if text is None:
            text = _kustomization(resources, components)
            if render_cache:
                render_cache.put_kustomization(key, text)
        tree.files[f"{folder}/kustomization.yaml"] = text


def _kustomization(resources: list[str], components: list[str]) -> str:
    from generator.yamlio import dump_documents

    document: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                "kind": "Kustomization", "resources": resources}
    if components:
        document["components"] = components
    return HEADER.format(source="the files beside it") + dump_documents([document])
