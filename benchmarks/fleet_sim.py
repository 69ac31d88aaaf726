"""A simulated 10,000-GPU fleet (issue 15): the control plane's costs at growing fleet sizes.

Each piece of benchmarks/fleet/ measures one part at each size: the capacity planner, `gkr
render` through the CLI beside `kubectl kustomize`, Warden with one workflow per node on the
Temporal dev server (Kubernetes and Prometheus API test servers, injected faults), straggler
analysis over every rank's hour of telemetry on chDB, and the FleetMonitor actor with every
rank reporting. Figures are printed one row per figure, one column per size, so growth shows;
a figure with a goal says whether the largest size met it.

    .venv/bin/python -m benchmarks.fleet_sim                       # 125, 500, 1,250 nodes
    .venv/bin/python -m benchmarks.fleet_sim --nodes 125 --pieces planner,stragglers

(a module, from the repository root: the pieces are the package benchmarks.fleet)
"""

from __future__ import annotations

import argparse
import importlib
import sys

from benchmarks.fleet import Figure, Fleet

PIECES = ("planner", "render", "warden", "stragglers", "monitor")


def run(pieces: list[str], sizes: list[int]) -> dict[tuple[str, str], dict[int, Figure]]:
    """Every piece at every size; figures keyed by (piece, name), then by size."""
    table: dict[tuple[str, str], dict[int, Figure]] = {}
    for piece in pieces:
        module = importlib.import_module(f"benchmarks.fleet.{piece}")
        for nodes in sizes:
            print(f"... {piece} at {nodes} nodes", file=sys.stderr, flush=True)
            for figure in module.measure(Fleet(nodes)):
                table.setdefault((figure.piece, figure.name), {})[nodes] = figure
    return table


def report(table: dict[tuple[str, str], dict[int, Figure]], sizes: list[int]) -> None:
    header = "".join(f"{f'{n} nodes':>14}" for n in sizes)
    print(f"{'piece':<11}{'figure':<44}{header}  unit    goal (largest size)")
    for (piece, name), by_size in table.items():
        cells = "".join(f"{_cell(by_size.get(n)):>14}" for n in sizes)
        last = by_size[max(by_size)]
        print(f"{piece:<11}{name:<44}{cells}  {last.unit:<7} {last.verdict()}")


def _cell(figure: Figure | None) -> str:
    if figure is None:
        return "-"
    return f"{figure.value:,.0f}" if abs(figure.value) >= 100 else f"{figure.value:.3g}"


def sizes_of(text: str) -> list[int]:
    """`125,500,1250` -> fleet sizes in nodes; each a whole number of at least one node."""
    try:
        sizes = [int(n) for n in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give node counts >= 1, e.g. 125,500,1250")
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=sizes_of, default=[125, 500, 1250],
                        help="fleet sizes in nodes of 8 GPUs, comma-separated")
    parser.add_argument("--pieces", default=",".join(PIECES),
                        help=f"which pieces to run, comma-separated: {', '.join(PIECES)}")
    options = parser.parse_args()
    sizes = options.nodes
    pieces = options.pieces.split(",")
    unknown = sorted(set(pieces) - set(PIECES))
    if unknown:
        parser.error(f"unknown piece(s) {', '.join(unknown)}; choose from {', '.join(PIECES)}")
    report(run(pieces, sizes), sizes)


if __name__ == "__main__":
    main()
