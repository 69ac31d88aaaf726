"""Rendering the fleet's job specs through the CLI, beside `kubectl kustomize` of the output.

One job spec per GPU of the fleet (10,000 at 1,250 nodes) over three clusters, rendered by
`gkr render` as a user runs it (a fresh process): cold (no outputs, no caches) and after a
one-spec change, then `gkr validate`. Beside them, `kubectl kustomize` of the overlays (what
Argo CD builds on each sync) and of the same jobs through one kustomization per cluster: what
building these manifests with Kustomize costs, and what the overlays cost when they listed
the jobs. `kustomize build` grows with the square of the objects it holds, which is why each
cluster's jobs are synced as plain manifests (generator/paths.py `jobs_dir`); at 1,250 nodes
that baseline alone takes minutes (--no-baseline skips it).
The machinery is benchmarks/render.py's; this module sizes it to the fleet.

    .venv/bin/python -m benchmarks.fleet.render --nodes 125
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks.fleet import Figure, Fleet
from benchmarks.render import GKR, cold_render, kustomize_all, make_repo, one_change, run_timed
from generator.kustomize import kubectl


def kustomize_jobs(root: Path) -> float:
    """`kubectl kustomize` of each cluster's jobs through a kustomization listing them."""
    total = 0.0
    for folder in sorted((root / "kustomize/overlays").glob("*/jobs")):
        listed = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.yaml"))
        kustomization = folder / "kustomization.yaml"
        kustomization.write_text("resources:\n" + "".join(f"- {p}\n" for p in listed))
        try:
            total += run_timed([kubectl(), "kustomize", str(folder)], root)[0]
        finally:
            kustomization.unlink()
    return total


def measure(fleet: Fleet, specs: int | None = None, baseline: bool = True) -> list[Figure]:
    count = specs if specs is not None else fleet.gpus
    with tempfile.TemporaryDirectory(prefix="gkr-fleet-render-") as scratch:
        root = Path(scratch)
        make_repo(root, count)
        cold, _ = cold_render(root)
        change, _ = one_change(root, [0])
        validate, _ = run_timed([GKR, "validate"], root)
        overlays, _ = kustomize_all(root)
        figures = [
            Figure("render", "job specs", count, "specs"),
            Figure("render", "cold gkr render", cold, "s"),
            Figure("render", "gkr render, one spec changed", change, "s", goal=1.0),
            Figure("render", "gkr validate", validate, "s"),
            Figure("render", "kubectl kustomize, every overlay", overlays, "s"),
        ]
        if baseline:
            jobs = kustomize_jobs(root)
            figures += [Figure("render", "kubectl kustomize of the same jobs", jobs, "s"),
                        Figure("render", "cold render / kustomize of the jobs", cold / jobs,
                               "ratio", goal=1.0)]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--specs", type=int, help="job specs (default: one per GPU)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip kubectl kustomize of the jobs (minutes at 1,250 nodes)")
    options = parser.parse_args()
    for figure in measure(Fleet(options.nodes), options.specs, not options.no_baseline):
        print(f"{figure.name:<36} {figure.value:10.3f} {figure.unit:<6} {figure.verdict()}")


if __name__ == "__main__":
    main()
