"""`gkr check`: the preflight suite on named nodes (one Job each) or on this machine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.catalog import Catalog
from generator.cluster.preflight import described_node, failed_nodes, node_check_job, run_on_node
from generator.cluster.target import Asked, find_cluster
from generator.errors import BadRequest, CheckFailed
from generator.pods import RUNTIME_IMAGE
from runtime.kube import NODE, Kube, Obj
from runtime.preflight import PreflightConfig, run_suite


@dataclass(frozen=True)
class CheckRequest:
    """Which nodes, and how their check Jobs are made."""

    root: Path
    nodes: tuple[str, ...] = ()
    local: bool = False
    """Run the suite on this machine instead."""
    cluster: str | None = None
    namespace: str | None = None
    """Namespace of the check Jobs (default: the catalog's)."""
    accelerator: str | None = None
    """The nodes' accelerator, instead of reading their labels."""
    image: str | None = None
    timeout_s: int = 900
    dry_run: bool = False
    """Make the Jobs only."""

    def __post_init__(self) -> None:
        if not self.local and not self.nodes:
            raise BadRequest("name the NODE… to check, or pass --local")


@dataclass(frozen=True)
class Checked:
    """The Jobs made (a dry run stops there) and the results of the suite."""

    jobs: list[Obj] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)


def check(request: CheckRequest, progress: Callable[[str], None]) -> Checked:
    if request.local:
        return Checked(results=[run_suite(PreflightConfig()).model_dump()])
    # With --accelerator a dry run needs no cluster: the nodes are described, not read.
    offline = bool(request.accelerator and request.dry_run)
    catalog, found = find_cluster(Asked(request.root, None, request.cluster, None))
    api = None if offline else Kube.connect(found.kube_context)
    jobs = [_check_job(request, catalog, api, node) for node in request.nodes]
    if request.dry_run or api is None:
        return Checked(jobs)
    return Checked(jobs, [run_on_node(api, job, request.timeout_s, progress) for job in jobs])


def _check_job(request: CheckRequest, catalog: Catalog, api: Kube | None, name: str) -> Obj:
    if request.accelerator:
        node = described_node(catalog, name, request.accelerator)
    else:
        assert api is not None  # only a dry run with --accelerator goes without the cluster
        node = api.get(NODE, name)
    return node_check_job(catalog, node, request.namespace, request.image or RUNTIME_IMAGE,
                          request.timeout_s)


def raise_if_failed(results: list[dict[str, Any]]) -> None:
    """CheckFailed naming the nodes whose suite failed (after the results were shown)."""
    failed = failed_nodes(results)
    if failed:
        raise CheckFailed(f"preflight failed on {', '.join(failed)}")
