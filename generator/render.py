"""`render_tree`, one straight line: catalog + specs → resolved jobs → manifests → files.

Nothing touches the disk here (see `generator.output`). A content-addressed cache keeps each
spec's rendered documents, so a render after a one-spec change re-renders one spec.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.cache import Entry, RenderCache, digest, file_digest
from generator.catalog import Catalog
from generator.errors import InvalidInput, Problem
from generator.manifests import render_documents, render_job
from generator.paths import HEADER, component_dir, job_path, overlay_dir
from generator.platform import produce_platform
from generator.resolve import ResolvedJob, assemble, resolve
from generator.specs import load_spec, spec_files
from generator.tree import Producer, RenderContext, RenderedJob, Tree
from generator.yamlio import dump_documents

# Below this many uncached specs, rendering in one process beats starting workers.
PARALLEL_THRESHOLD = 200


@dataclass(frozen=True)
class Fresh:
    """A spec rendered in this run: its cache entry, and its resolved job unless a worker
    process rendered it (catalog objects are not sent back; the parent re-attaches them)."""

    entry: Entry
    job: ResolvedJob | None


def render_jobs(root: Path, catalog: Catalog, cache: RenderCache | None) -> list[RenderedJob]:
    """Resolve and render every spec under jobs/; reports the problems of all specs at once.

    Cached specs are rebuilt cheaply; the others are rendered, on every core when there are
    many (a cold render of a large repository is CPU-bound Python)."""
    paths = spec_files(root)
    keys = [digest(p.as_posix().encode(), p.read_bytes()) for p in paths]
    cached = {k: e for k in keys if cache and (e := cache.get(k)) is not None}
    missing = [(p, k) for p, k in zip(paths, keys, strict=True) if k not in cached]
    outcomes = _render_all([p for p, _ in missing], root, catalog)
    problems = [p for outcome in outcomes if isinstance(outcome, list) for p in outcome]
    if problems:
        raise InvalidInput(problems)
    fresh = {k: made for (_, k), made in zip(missing, outcomes, strict=True)
             if isinstance(made, Fresh)}
    if cache:
        for key, made in fresh.items():
            cache.put(key, made.entry)
    return [_rendered(path, root, fresh.get(key) or Fresh(cached[key], None), catalog)
            for path, key in zip(paths, keys, strict=True)]


def _rendered(path: Path, root: Path, made: Fresh, catalog: Catalog) -> RenderedJob:
    """A rendered spec with its resolved job (rebuilt from the cached spec when needed)."""
    entry = made.entry
    job = made.job or assemble(entry.spec, entry.team, path.relative_to(root).as_posix(),
                               entry.user_env, catalog)
    return RenderedJob(job, job_path(job), entry.documents, entry.text)


def _render_all(paths: list[Path], root: Path, catalog: Catalog) -> list[Fresh | list[Problem]]:
    workers = min(os.cpu_count() or 1, len(paths) // (PARALLEL_THRESHOLD // 2))
    if len(paths) < PARALLEL_THRESHOLD or workers < 2:
        return [_render_spec(path, root, catalog) for path in paths]
    catalog.load_all()  # forked workers inherit the parsed catalog
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                             initializer=_adopt, initargs=(root, catalog)) as pool:
        return list(pool.map(_render_in_worker, paths, chunksize=32))


_WORKER: tuple[Path, Catalog] | None = None


def _adopt(root: Path, catalog: Catalog) -> None:
    global _WORKER
    _WORKER = (root, catalog)


def _render_in_worker(path: Path) -> Fresh | list[Problem]:
    assert _WORKER is not None
    made = _render_spec(path, *_WORKER)
    return Fresh(made.entry, None) if isinstance(made, Fresh) else made


def _render_spec(path: Path, root: Path, catalog: Catalog) -> Fresh | list[Problem]:
    """One spec rendered from scratch, as a cache entry (or its problems)."""
    try:
        loaded = load_spec(path, root)
        job = resolve(loaded, catalog)
    except InvalidInput as error:
        return error.problems
    documents = render_job(job)
    text = HEADER.format(source=job.source) + dump_documents(documents)
    env_file = path.parent / job.spec.env_file if job.spec.env_file else None
    dependencies = {str(env_file): file_digest(env_file)} if env_file else {}
    entry = Entry(job.spec, loaded.source.team, job.user_env, documents, text, dependencies)
    return Fresh(entry, job)


def produce_jobs(ctx: RenderContext, tree: Tree) -> None:
    for rendered in ctx.rendered:
        tree.add(rendered.path, rendered.documents, rendered.job.source, rendered.text)


def produce_base(ctx: RenderContext, tree: Tree) -> None:
    """Cluster-wide objects every overlay shares: the two priority tiers (seed §4.2)."""
    priorities = ctx.catalog.platform.priorities
    documents = render_documents("base/priorities.yaml.j2", priorities=priorities)
    tree.add("kustomize/base/priorities.yaml", documents, "platform/catalog/gke.yaml")


PRODUCERS: list[Producer] = [produce_base, produce_jobs, produce_platform]


def render_tree(root: Path, catalog: Catalog | None = None, use_cache: bool = True) -> Tree:
    """Render everything in memory; the cache (if used) is saved only after success."""
    catalog = catalog or Catalog(root)
    cache = RenderCache(root, catalog.files()) if use_cache else None
    ctx = RenderContext(root, catalog, render_jobs(root, catalog, cache))
    tree = Tree(jobs=ctx.jobs)
    for produce in PRODUCERS:
        produce(ctx, tree)
    _add_kustomizations(tree, catalog)
    if cache:
        cache.save()
    return tree


def _add_kustomizations(tree: Tree, catalog: Catalog) -> None:
    """kustomization.yaml files derived from the files present: nothing to keep in sync."""
    folders: dict[str, tuple[list[str], list[str]]] = {"kustomize/base": ([], [])}
    for name, cluster in catalog.clusters.items():
        components = [
            os.path.relpath(component_dir(accel), overlay_dir(name))
            for accel in sorted(cluster.accelerators)
            if f"{component_dir(accel)}/kustomization.yaml" in tree.files
        ]
        folders[overlay_dir(name)] = (["../../base"], components)
    for folder, (resources, components) in folders.items():
        resources = resources + sorted(
            path.removeprefix(folder + "/") for path in tree.files
            if path.startswith(folder + "/") and not path.endswith("kustomization.yaml")
        )
        document: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                    "kind": "Kustomization", "resources": resources}
        if components:
            document["components"] = components
        tree.files[f"{folder}/kustomization.yaml"] = (
            HEADER.format(source="the files beside it") + dump_documents([document]))


