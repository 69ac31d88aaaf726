"""`gkr render`, `gkr validate`, `gkr diff` and `gkr schema`: the GitOps side of GKR.

Each command imports the library in its body, so `gkr --help` and TAB completion stay fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from generator.cli._app import RootOption, app, err_console, out_console
from generator.cli._output import print_diff


@app.command()
def render(
    check: Annotated[bool, typer.Option(
        "--check", help="Change nothing; exit 3 with a diff if the committed tree is stale."
    )] = False,
    root: RootOption = None,
) -> None:
    """Render every job spec into the Kustomize overlays (atomic and idempotent)."""
    from generator.errors import StaleTree
    from generator.output import diff_tree, write_tree
    from generator.render import render_tree
    from generator.repo import find_root

    root = find_root(root)
    tree = render_tree(root)
    if check:
        diff = diff_tree(root, tree)
        if diff:
            print_diff(diff)
            raise StaleTree("the rendered tree is stale: run `gkr render` and commit the result")
        out_console.print(f"up to date: {len(tree.jobs)} jobs, {len(tree.files)} files")
        return
    changes = write_tree(root, tree)
    if changes.recovered:
        err_console.print("finished writing the tree of an interrupted `gkr render` first")
    for path in changes.written:
        out_console.print(f"  wrote    {path}")
    for path in changes.removed:
        out_console.print(f"  removed  {path}")
    out_console.print(f"rendered {len(tree.jobs)} jobs: {len(changes.written)} files written, "
                      f"{len(changes.removed)} removed, "
                      f"{len(tree.files) - len(changes.written)} unchanged")


@app.command()
def diff(
    exit_code: Annotated[bool, typer.Option(
        "--exit-code", help="Exit 3 when the rendered tree would change."
    )] = False,
    root: RootOption = None,
) -> None:
    """Show what the current specs and catalog would change in the rendered tree."""
    from generator.errors import StaleTree
    from generator.output import diff_tree
    from generator.render import render_tree
    from generator.repo import find_root

    root = find_root(root)
    text = diff_tree(root, render_tree(root))
    if not text:
        err_console.print("no changes")
        return
    print_diff(text)
    if exit_code:
        raise StaleTree("the rendered tree would change")


@app.command()
def validate(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Spec files or folders to check (default: the whole repository)."
    )] = None,
    kustomize: Annotated[bool, typer.Option(
        help="Also build every overlay with `kubectl kustomize`."
    )] = True,
    root: RootOption = None,
) -> None:
    """Check specs and the committed tree Argo CD applies (schemas, policies, kubectl kustomize
    of every overlay); exit 1 (spec or catalog), 5 (a fault in the tree) or 3 (stale)."""
    from generator.repo import find_root
    from generator.validate import validate_repository, validate_specs

    root = find_root(root)
    report = (validate_specs(root, paths) if paths
              else validate_repository(root, kustomize=kustomize))
    out_console.print(report.summary())


@app.command()
def schema(root: RootOption = None) -> None:
    """Print the JSON Schema of job spec files, with the catalog's clusters, accelerators and
    images as enums (for editors: yaml-language-server; see the README)."""
    import json

    from generator.catalog import Catalog
    from generator.jobschema import job_schema
    from generator.repo import find_root

    print(json.dumps(job_schema(Catalog(find_root(root))), indent=2))
