"""Benchmark: render + validate 1,000 synthetic job specs over 3 clusters.

Prints the time of a full render with schema validation, of an incremental render after
one spec changes, and of `kubectl kustomize` over the resulting overlays (what a user
would otherwise run to build the same manifests), measured in the same run.

    .venv/bin/python benchmarks/render.py [--specs 1000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

from generator.catalog import Catalog
from generator.output import Changes, write_tree
from generator.render import render_tree
from generator.validate import check_kustomize, validate_tree

REPO = Path(__file__).resolve().parent.parent
THIRD_CLUSTER = "bench-usw1"
T = TypeVar("T")


def make_repo(root: Path, count: int) -> None:
    """A copy of the repository's catalog, a third cluster, and `count` synthetic specs."""
    shutil.copytree(REPO / "platform/catalog", root / "platform/catalog")
    shutil.copytree(REPO / "clusters", root / "clusters")
    third = yaml.safe_load((REPO / "clusters/usc1-prod.yaml").read_text())
    third["name"] = THIRD_CLUSTER
    (root / f"clusters/{THIRD_CLUSTER}.yaml").write_text(yaml.safe_dump(third))
    catalog = Catalog(root)
    clusters = sorted(catalog.clusters.values(), key=lambda c: c.name)
    for i in range(count):
        cluster = clusters[i % len(clusters)]
        team = sorted(cluster.teams)[i % len(cluster.teams)]
        accelerator = sorted(cluster.accelerators)[(i // 3) % len(cluster.accelerators)]
        spec = _spec(i, cluster.name, accelerator)
        path = root / "jobs" / team / f"{spec.pop('name')}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(spec, sort_keys=False))


def _spec(i: int, cluster: str, accelerator: str) -> dict:
    kind = ("rayjob", "raycluster", "job")[i % 3]
    spec = {"name": f"bench-{kind}-{i:04d}", "kind": kind, "cluster": cluster,
            "owner": "bench@reve.ai", "pods": 1 + i % 4, "accelerator": accelerator,
            "image": "trainer", "preemptible": i % 5 == 0,
            "env": {"RUN_INDEX": str(i)}}
    if kind != "raycluster":
        spec["cmd"] = f"python -m runtime.train configs/bench.yaml run.name=run-{i}"
        spec["deadline"] = "1d"
    return spec


def timed(label: str, action: Callable[[], T]) -> tuple[T, float]:
    """Wall time, and this process's CPU time (robust when other work shares the cores)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = action()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{label:<56} {elapsed:7.3f} s wall {cpu:7.3f} s cpu")
    return result, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--specs", type=int, default=1000)
    count = parser.parse_args().specs
    with tempfile.TemporaryDirectory(prefix="gkr-bench-") as scratch:
        root = Path(scratch)
        make_repo(root, count)

        def full() -> tuple:
            catalog = Catalog(root)
            tree = render_tree(root, catalog)
            validate_tree(tree, catalog, kustomize=False)  # rules, schemas, policies, Terraform
            return tree, write_tree(root, tree)

        def render() -> Changes:  # what `gkr render` does
            return write_tree(root, render_tree(root, Catalog(root)))

        (tree, changes), t_full = timed(f"full render + validate + write ({count})", full)
        documents = sum(len(d) for d in tree.manifests.values())
        print(f"  {len(tree.jobs)} specs, {documents} manifests, {len(changes.written)} files")
        edited = sorted((root / "jobs").rglob("*.yaml"))[0]
        edited.write_text(edited.read_text() + "labels: {edited: 'yes'}\n")
        changes, t_incr = timed("incremental render + write after one spec change", render)
        assert changes.written == [next(p for p in changes.written if edited.stem in p)]
        edited.write_text(edited.read_text().replace("edited: 'yes'", "edited: 'again'"))
        timed("incremental render + validate + write, one spec", full)
        (problems, built), t_kust = timed(
            "kubectl kustomize of every kustomization", lambda: check_kustomize(tree))
        assert not problems, problems
        print(f"  {built} kustomizations built")
        print(f"ratio full render+validate / kubectl kustomize: {t_full / t_kust:.2f}")
        print(f"ratio incremental render / full: {t_incr / t_full:.2f}")


if __name__ == "__main__":
    main()
