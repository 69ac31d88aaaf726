"""Checks of the generated platform in `gkr validate`: the Terraform structure (python-hcl2
over the hand-written modules, JSON roots against the catalog), `terraform fmt -check`, and
every add-on Application's Helm values against its pinned chart's vendored defaults and schema
(generator.schemas.chartvalues; the catalog's own values are checked when it loads).

`terraform validate` needs the google provider, which `terraform init` downloads; where it
cannot (no binary, no network, no local mirror) the check is skipped and says why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2

from generator.addons import Addons, load_addons
from generator.catalog import Catalog
from generator.errors import Problem
from generator.paths import ARGOCD_ROOT
from generator.platform.context import PlatformContext
from generator.platform.terraform import accelerator_pools, cluster_root, module_networks
from generator.schemas.chartvalues import contract
from generator.tree import Tree

MODULE = "terraform/modules/gke-cluster"
NODE_POOLS = "google_container_node_pool"


@dataclass
class ToolReport:
    """Problems found by external tools, and the checks skipped with their reason."""

    problems: list[Problem] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def module_variables(root: Path, module: str = MODULE) -> dict[str, dict[str, Any]]:
    """The `variable` blocks of a hand-written module, parsed with python-hcl2."""
    variables: dict[str, dict[str, Any]] = {}
    for path in sorted((root / module).glob("*.tf")):
        with path.open(encoding="utf-8") as handle:
            for block in hcl2.load(handle).get("variable", []):
                variables.update({_unquote(k): v for k, v in block.items()})
    return variables


def _unquote(name: str) -> str:
    """python-hcl2 8 keeps the quotes of block labels ("name"); earlier versions drop them."""
    return name.strip('"')


def module_resources(root: Path, module: str = MODULE) -> dict[str, dict[str, Any]]:
    """Resource type → {name: body} of a hand-written module."""
    resources: dict[str, dict[str, Any]] = {}
    for path in sorted((root / module).glob("*.tf")):
        with path.open(encoding="utf-8") as handle:
            for block in hcl2.load(handle).get("resource", []):
                for kind, named in block.items():
                    resources.setdefault(_unquote(kind), {}).update(
                        {_unquote(k): v for k, v in named.items()})
    return resources


def check_terraform_structure(tree: Tree, catalog: Catalog) -> list[Problem]:
    """Each cluster has its root; the root passes exactly the module's variables, and its
    node pools and their networks are the catalog's; the module makes one GPU pool per entry."""
    # A scratch repository without the hand-written module (tests, forks) is checked
    # against the catalog only.
    has_module = (catalog.root / MODULE).is_dir()
    variables = module_variables(catalog.root) if has_module else {}
    ctx = PlatformContext(catalog, load_addons(catalog.root), tree)
    problems = _module_problems(catalog.root) if has_module else []
    for cluster in catalog.clusters.values():
        path = cluster_root(cluster)
        if path not in tree.files:
            problems.append(Problem(path, None, "", "the cluster has no Terraform root"))
            continue
        module = json.loads(tree.files[path])["module"]["cluster"]
        if has_module:
            problems += _variable_problems(path, set(module) - {"source"}, variables)
        wanted = {"accelerator_pools": accelerator_pools(ctx, cluster),
                  "node_networks": module_networks(ctx, cluster)}
        problems += [Problem(path, None, f"module.cluster.{key}",
                             f"differs from clusters/{cluster.name}.yaml")
                     for key, value in wanted.items() if module.get(key) != value]
    return problems


def _variable_problems(
    path: str, passed: set[str], variables: dict[str, dict[str, Any]]
) -> list[Problem]:
    required = {name for name, body in variables.items() if "default" not in body}
    found = [(n, "not a variable of the module") for n in sorted(passed - set(variables))]
    found += [(n, "required by the module") for n in sorted(required - passed)]
    return [Problem(path, None, f"module.cluster.{name}", message) for name, message in found]


def _module_problems(root: Path) -> list[Problem]:
    pools = module_resources(root).get(NODE_POOLS, {})
    body = pools.get("accelerators", {})
    if "${var.accelerator_pools}" not in str(body.get("for_each", "")):
        return [Problem(f"{MODULE}/node_pools.tf", None, f"{NODE_POOLS}.accelerators",
                        "must make one node pool per entry of var.accelerator_pools")]
    return []


def terraform_binary() -> str | None:
    return shutil.which("terraform")


def check_terraform_fmt(root: Path) -> ToolReport:
    """`terraform fmt -check -recursive terraform/` (hand-written HCL; roots are JSON)."""
    binary = terraform_binary()
    if binary is None:
        return ToolReport(skipped=["terraform fmt -check: no terraform binary on PATH"])
    if not (root / "terraform").is_dir():
        return ToolReport()
    # Run from the root so that the files it lists are repository-relative.
    result = _run([binary, "fmt", "-check", "-recursive", "-list=true", "terraform"], root)
    files = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return ToolReport([Problem(f, None, "", "not formatted: run `terraform fmt`")
                       for f in files] if result.returncode else [])


def check_terraform_validate(root: Path, tree: Tree) -> ToolReport:
    """`terraform validate` of every cluster root, when the google provider can be installed."""
    binary = terraform_binary()
    if binary is None:
        return ToolReport(skipped=["terraform validate: no terraform binary on PATH"])
    report = ToolReport()
    with tempfile.TemporaryDirectory(prefix="gkr-terraform-") as scratch:
        shutil.copytree(root / "terraform" / "modules", Path(scratch, "terraform", "modules"))
        for path, text in tree.files.items():
            if path.startswith("terraform/"):
                Path(scratch, path).parent.mkdir(parents=True, exist_ok=True)
                Path(scratch, path).write_text(text, encoding="utf-8")
        for path in sorted(p for p in tree.files if p.startswith("terraform/")):
            folder = Path(scratch, path).parent
            init = _run([binary, "init", "-backend=false", "-input=false", "-no-color"], folder)
            if init.returncode:
                reason = _first_error(init.stderr)
                report.skipped.append(f"terraform validate {Path(path).parent}: providers "
                                      f"could not be installed (offline?): {reason}")
                continue
            done = _run([binary, "validate", "-no-color"], folder)
            if done.returncode:
                report.problems.append(Problem(path, None, "", done.stderr.strip()))
    return report


def _first_error(stderr: str) -> str:
    lines = [line.strip(" │") for line in stderr.splitlines()]
    errors = [line for line in lines if line.startswith("Error:")]
    detail = [line for line in lines if "could not connect" in line]
    return " ".join((errors + detail)[:2]) or (lines[-1] if lines else "no output")


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=300)


def check_terraform_tools(tree: Tree, catalog: Catalog) -> list[Problem]:
    """The TREE_CHECKS entry for `terraform fmt` (skipped silently without the binary)."""
    return check_terraform_fmt(catalog.root).problems


def check_chart_values(tree: Tree, catalog: Catalog) -> list[Problem]:
    """The Helm values of every add-on Application in the tree (the catalog's and what
    `gkr render` fills in) against the contract of the chart and version it installs."""
    return [problem for path, documents in sorted(tree.manifests.items())
            if path.startswith(f"{ARGOCD_ROOT}/apps/")
            for document in documents for problem in _application_values(path, document)]


def _application_values(path: str, application: dict[str, Any]) -> list[Problem]:
    source = (application.get("spec") or {}).get("source") or {}
    helm = source.get("helm")
    if not isinstance(helm, dict):
        return []  # an Application on a folder of this repository
    chart_name = source.get("chart") or str(source.get("repoURL", "")).rstrip("/").rsplit("/")[-1]
    chart = contract(chart_name, str(source.get("targetRevision")))
    values = helm.get("valuesObject") or {}
    if chart is None or not isinstance(values, dict):
        return []
    name = (application.get("metadata") or {}).get("name", "?")
    return [Problem(path, None, f"Application/{name} spec.source.helm.valuesObject.{p.dotted}",
                    p.message) for p in chart.problems(values)]


def unchecked_charts(addons: Addons) -> list[str]:
    """The add-ons whose chart contract is not vendored, so whose values go unchecked."""
    return [f"{name} ({addon.chart_name} {addon.version})"
            for name, addon in sorted(addons.addons.items())
            if contract(addon.chart_name, addon.version) is None]
