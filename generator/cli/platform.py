"""`gkr platform check` and `gkr platform scan-input`: the platform's own CI checks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from generator.cli._app import RootOption, app, err_console, out_console

platform_app = typer.Typer(help="Checks of the generated platform (Terraform, scan input).",
                           no_args_is_help=True)
app.add_typer(platform_app, name="platform")


@platform_app.command("check")
def check(root: RootOption = None) -> None:
    """Terraform structure, `terraform fmt -check` and `terraform validate`, and the add-ons'
    Helm values against their pinned charts (skips say why)."""
    from generator.addons import load_addons
    from generator.catalog import Catalog
    from generator.errors import CheckFailed, Problem
    from generator.platform.checks import (
        check_chart_values,
        check_terraform_fmt,
        check_terraform_structure,
        check_terraform_validate,
        unchecked_charts,
    )
    from generator.render import render_tree
    from generator.repo import find_root

    root = find_root(root)
    catalog = Catalog(root)
    tree = render_tree(root, catalog)
    fmt, validate = check_terraform_fmt(root), check_terraform_validate(root, tree)
    problems = check_terraform_structure(tree, catalog) + fmt.problems + validate.problems
    problems += check_chart_values(tree, catalog)
    unchecked = unchecked_charts(load_addons(root))
    skipped = fmt.skipped + validate.skipped + ([
        f"Helm values of {', '.join(unchecked)}: no chart defaults vendored in "
        "generator/schemas/charts/"] if unchecked else [])
    for reason in skipped:
        err_console.print(f"skipped: {reason}")
    if problems:
        raise CheckFailed("\n".join(str(p) for p in sorted(set(problems), key=Problem.sort_key)))
    out_console.print(f"terraform: {len(catalog.clusters)} cluster roots match the catalog; "
                      f"fmt {'skipped' if fmt.skipped else 'clean'}; validate "
                      f"{'skipped' if validate.skipped else 'clean'}; add-on values match "
                      "their charts")


@platform_app.command("scan-input")
def scan_input(
    target: Annotated[Path, typer.Argument(help="Folder to write the manifests into.")],
    root: RootOption = None,
) -> None:
    """Write every manifest the clusters receive (overlay builds, Warden, Argo CD) for checkov."""
    from generator.platform.scan import write_scan_input
    from generator.render import render_tree
    from generator.repo import find_root

    root = find_root(root)
    written = write_scan_input(root, render_tree(root), target)
    out_console.print(f"wrote {len(written)} files to {target}")
