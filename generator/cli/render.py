"""`gkr render`, `gkr validate`, `gkr diff` and `gkr schema`: the GitOps side of GKR."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.syntax import Syntax

from generator.catalog import Catalog
from generator.cli._app import app, err_console, out_console
from generator.errors import InvalidInput, StaleTree
from generator.manifests import render_job
from generator.output import diff_tree, write_tree
from generator.paths import job_path
from generator.render import render_tree
from generator.repo import find_root
from generator.resolve import resolve
from generator.spec import JobSpec
from generator.specs import load_spec, spec_files
from generator.tree import Tree
from generator.validate import check_schemas, validate_tree

RootOption = Annotated[
    Path | None, typer.Option("--root", help="Repository root (default: found from the cwd).")
]


@app.command()
def render(
    check: Annotated[bool, typer.Option(
        "--check", help="Change nothing; exit 3 with a diff if the committed tree is stale."
    )] = False,
    root: RootOption = None,
) -> None:
    """Render every job spec into the Kustomize overlays (atomic and idempotent)."""
    root = find_root(root)
    tree = render_tree(root)
    if check:
        diff = diff_tree(root, tree)
        if diff:
            out_console.print(Syntax(diff, "diff", theme="ansi_dark", word_wrap=True))
            raise StaleTree("the rendered tree is stale: run `gkr render` and commit the result")
        out_console.print(f"up to date: {len(tree.jobs)} jobs, {len(tree.files)} files")
        return
    changes = write_tree(root, tree)
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
    root = find_root(root)
    text = diff_tree(root, render_tree(root))
    if not text:
        err_console.print("no changes")
        return
    out_console.print(Syntax(text, "diff", theme="ansi_dark", word_wrap=True))
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
    """Check specs, rendered manifests (schemas, policies) and overlays; exit 1 or 5 on failure."""
    root = find_root(root)
    catalog = Catalog(root)
    if paths:
        _validate_specs(root, catalog, paths)
        return
    tree = render_tree(root, catalog)
    built = validate_tree(tree, catalog, kustomize=kustomize)
    manifests = sum(len(docs) for docs in tree.manifests.values())
    out_console.print(f"valid: {len(tree.jobs)} specs, {manifests} manifests, "
                      f"{built} kustomizations built")


def _validate_specs(root: Path, catalog: Catalog, paths: list[Path]) -> None:
    """Only the named specs: rules, rendering and schemas, no overlay build."""
    problems, tree = [], Tree()
    for path in spec_files(root, [p.resolve() for p in paths]):
        try:
            job = resolve(load_spec(path, root), catalog)
        except InvalidInput as error:
            problems += error.problems
            continue
        tree.add(job_path(job), render_job(job), job.source)
    problems += check_schemas(tree, catalog)
    if problems:
        raise InvalidInput(problems)
    out_console.print(f"valid: {len(tree.manifests)} specs")


@app.command()
def schema() -> None:
    """Print the JSON Schema of job specs (for editors: yaml-language-server)."""
    document = JobSpec.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    print(json.dumps(document, indent=2))
