"""Benchmark: render + validate 1,000 synthetic job specs over 3 clusters.

Library mode (default) times the renderer in this process: a full render with schema
validation, an incremental render after one spec changes, and `kubectl kustomize` over the
resulting overlays (what a user would otherwise run to build the same manifests).

CLI mode (`--cli`) times `gkr` as a user runs it, each command a fresh process, and prints
the figures of issue 11 side by side with `kubectl kustomize` measured in the same run:
`gkr --help`, a cold `gkr render`, a one-spec change, a no-op render and `gkr validate`.

    .venv/bin/python benchmarks/render.py [--specs 1000]
    .venv/bin/python benchmarks/render.py --cli [--specs 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

from generator.catalog import Catalog
from generator.kustomize import kubectl
from generator.output import Changes, write_tree
from generator.render import render_tree
from generator.validate import check_kustomize, validate_tree

REPO = Path(__file__).resolve().parent.parent
GKR = str(Path(sys.executable).with_name("gkr"))
THIRD_CLUSTER = "bench-usw1"
# What a cold render starts without: the outputs and gkr's caches.
OUTPUTS = (".gkr", "kustomize", "platform/argocd", "platform/warden", "terraform")
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


def library_mode(count: int) -> None:
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


def run_timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, children included) of one command; it must
    succeed, or the figures would time an error message."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def best(repeat: int, action: Callable[[], tuple[float, float]]) -> tuple[float, float]:
    """The fastest of `repeat` runs: noise on a shared machine only ever adds time."""
    return min((action() for _ in range(repeat)), key=lambda figures: figures[0])


def kustomize_all(root: Path) -> tuple[float, float]:
    """`kubectl kustomize` of every overlay and the base, one after another, as a user would
    build them (components are built through the overlays that include them)."""
    folders = sorted(p.parent for p in (root / "kustomize").rglob("kustomization.yaml")
                     if "components" not in p.relative_to(root).parts)
    figures = [run_timed([kubectl(), "kustomize", str(folder)], root) for folder in folders]
    return sum(f[0] for f in figures), sum(f[1] for f in figures)


def cold_render(root: Path) -> tuple[float, float]:
    for output in OUTPUTS:
        if output == "platform/warden":
            shutil.rmtree(root / output / "generated", ignore_errors=True)
        else:
            shutil.rmtree(root / output, ignore_errors=True)
    return run_timed([GKR, "render"], root)


def one_change(root: Path, counter: list[int]) -> tuple[float, float]:
    """Edit one spec (a new value each time, so every run has one change to write)."""
    counter[0] += 1
    spec = sorted((root / "jobs").rglob("*.yaml"))[0]
    text = spec.read_text().split("labels:")[0]
    spec.write_text(text + f"labels: {{edited: 'run-{counter[0]}'}}\n")
    return run_timed([GKR, "render"], root)


def row(label: str, figures: tuple[float, float], versus: str = "") -> None:
    wall, cpu = figures
    print(f"{label:<44} {wall:7.3f} s wall {cpu:7.3f} s cpu   {versus}")


def cli_mode(count: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="gkr-bench-cli-") as scratch:
        root = Path(scratch)
        make_repo(root, count)
        print(f"gkr through the CLI, {count} specs over 3 clusters, best of {repeat}")
        help_gkr = best(repeat, lambda: run_timed([GKR, "--help"], root))
        help_kubectl = best(repeat, lambda: run_timed([kubectl(), "--help"], root))
        row("gkr --help", help_gkr,
            f"kubectl --help {help_kubectl[0]:.3f} s; goal < 0.25 s")
        cold = best(repeat, lambda: cold_render(root))
        kustomize = best(repeat, lambda: kustomize_all(root))
        row(f"cold gkr render ({count} specs)", cold,
            f"kubectl kustomize {kustomize[0]:.3f} s; ratio {cold[0] / kustomize[0]:.2f} "
            "(goal <= 0.5)")
        counter = [0]
        row("gkr render after a one-spec change", best(repeat, lambda: one_change(root, counter)),
            "goal < 0.3 s")
        row("gkr render, nothing changed", best(repeat, lambda: run_timed([GKR, "render"], root)))
        row("gkr render --check", best(repeat, lambda: run_timed([GKR, "render", "--check"], root)))
        one_change(root, counter)  # validate checks a tree it has not seen whole
        first = run_timed([GKR, "validate"], root)
        again = best(repeat, lambda: run_timed([GKR, "validate"], root))
        for label, figures in (("first after a change", first), ("again", again)):
            row(f"gkr validate ({count} specs), {label}", figures,
                f"kubectl kustomize {kustomize[0]:.3f} s; ratio "
                f"{figures[0] / kustomize[0]:.2f} (goal <= 1.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--specs", type=int, default=1000, help="synthetic job specs")
    parser.add_argument("--cli", action="store_true",
                        help="time `gkr` commands as a user runs them (issue 11 figures)")
    parser.add_argument("--repeat", type=int, default=3, help="CLI mode: best of N runs")
    options = parser.parse_args()
    if options.cli:
        cli_mode(options.specs, options.repeat)
    else:
        library_mode(options.specs)


if __name__ == "__main__":
    main()
