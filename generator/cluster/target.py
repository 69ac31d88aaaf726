"""Which cluster and namespace a command means when its flags do not say, as kubectl-ray
decides: the job's spec `jobs/<team>/NAME.yaml` first, then the current kubeconfig context
(the cluster whose `kube_context` it is, and its namespace when that is a team namespace),
then the cluster's only team namespace."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from generator.catalog import DNS_LABEL, Catalog, Cluster
from generator.errors import BadRequest, GkrError
from generator.placement import JOBS_DIR
from generator.yamlio import load_document, read_input
from runtime.kube import Context, current_context


@dataclass(frozen=True)
class Asked:
    """What the command line said: the job's name and the flags, None where not given."""

    root: Path
    job: str | None = None
    cluster: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Target:
    """Where a command acts: the repository's catalog, one of its clusters, a namespace."""

    root: Path
    catalog: Catalog
    cluster: Cluster
    namespace: str


@dataclass(frozen=True)
class _Home:
    """Where a spec in jobs/ puts its job."""

    cluster: str
    namespace: str | None


def find_cluster(asked: Asked) -> tuple[Catalog, Cluster]:
    """The cluster meant: --cluster, the spec's, or the current kube context's."""
    catalog = Catalog(asked.root)
    homes = _spec_homes(asked, catalog)
    name = (asked.cluster or _only({h.cluster for h in homes})
            or _context_cluster(catalog, current_context()))
    return catalog, _cluster(catalog, name, asked.job)


def find_target(asked: Asked) -> Target:
    """The cluster and namespace meant: the flags, else the spec's, else the kube context's,
    else the cluster's only team namespace."""
    catalog, cluster = find_cluster(asked)
    namespace = asked.namespace or (
        _only({h.namespace for h in _spec_homes(asked, catalog) if h.cluster == cluster.name})
        or _context_namespace(cluster, current_context()) or _only_team(cluster))
    return Target(asked.root, catalog, cluster, namespace)


def _only(values: set[str | None]) -> str | None:
    return next(iter(values)) if len(values) == 1 else None


def _spec_homes(asked: Asked, catalog: Catalog) -> list[_Home]:
    """The clusters and namespaces of the specs named `asked.job` (one per team folder)."""
    jobs = asked.root / JOBS_DIR
    if not asked.job or not re.fullmatch(DNS_LABEL, asked.job) or not jobs.is_dir():
        return []
    found = [_home(team / f"{asked.job}.yaml", asked.root, catalog)
             for team in sorted(jobs.iterdir()) if (team / f"{asked.job}.yaml").is_file()]
    return [h for h in found if h and (asked.cluster in (None, h.cluster))
            and (asked.namespace in (None, h.namespace))]


def _home(path: Path, root: Path, catalog: Catalog) -> _Home | None:
    display = path.relative_to(root).as_posix()
    try:  # a broken spec gives no default; `gkr validate` reports it
        data, _ = load_document(display, read_input(path, root, display))
    except GkrError:
        return None
    name = data.get("cluster") if isinstance(data, dict) else None
    cluster = catalog.clusters.get(name) if isinstance(name, str) else None
    if cluster is None:
        return None
    team = cluster.teams.get(path.parent.name)
    namespace = data.get("namespace") or (team.namespace if team else None)
    return _Home(cluster.name, namespace if isinstance(namespace, str) else None)


def _context_cluster(catalog: Catalog, context: Context | None) -> str | None:
    if context is None:
        return None
    return next((c.name for c in catalog.clusters.values()
                 if c.kube_context == context.name), None)


def _context_namespace(cluster: Cluster, context: Context | None) -> str | None:
    if context is None or context.name != cluster.kube_context or not context.namespace:
        return None
    return context.namespace if cluster.team_of_namespace(context.namespace) else None


def _only_team(cluster: Cluster) -> str:
    if len(cluster.teams) == 1:
        return next(iter(cluster.teams.values())).namespace
    namespaces = ", ".join(sorted(t.namespace for t in cluster.teams.values()))
    raise BadRequest(f"--namespace is needed on {cluster.name} (no spec or kube context "
                     f"names one): one of {namespaces}")


def _cluster(catalog: Catalog, name: str | None, job: str | None) -> Cluster:
    known = ", ".join(sorted(catalog.clusters))
    if name is None:
        spec = f"no spec jobs/<team>/{job}.yaml names one and " if job else ""
        raise BadRequest(f"--cluster is needed: {spec}the current kube context is none of the "
                         f"clusters' kube_context; clusters: {known}")
    cluster = catalog.clusters.get(name)
    if cluster is None:
        raise BadRequest(f"--cluster {name!r}: unknown; known: {known}")
    return cluster
