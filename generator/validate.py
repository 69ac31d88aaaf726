"""`gkr validate`: spec rules (while rendering), then schemas of every rendered manifest,
then `kubectl kustomize` of every overlay, on the rendered tree written to a scratch copy.

Checks over the rendered tree share one protocol (`TreeCheck`), so platform policies add
themselves to TREE_CHECKS without touching the flow.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from generator import schemas
from generator.catalog import Catalog
from generator.errors import CheckFailed, Problem
from generator.kustomize import build
from generator.platform.checks import check_terraform_structure, check_terraform_tools
from generator.policies import check_job_policies
from generator.tree import Tree

TreeCheck = Callable[[Tree, Catalog], list[Problem]]


def check_schemas(tree: Tree, catalog: Catalog) -> list[Problem]:
    """Every manifest against the Kubernetes OpenAPI or CRD schema of its kind."""
    version = catalog.platform.kubernetes_version
    problems = []
    for path, documents in tree.manifests.items():
        for document in documents:
            try:
                errors = schemas.validate(document, version)
            except schemas.UnknownKind as error:
                problems.append(Problem(path, None, _name(document), str(error)))
                continue
            problems += [Problem(path, None, f"{_name(document)} {e.path}", e.message)
                         for e in errors]
    return problems


def _name(document: dict) -> str:
    return f"{document.get('kind', '?')}/{document.get('metadata', {}).get('name', '?')}"


TREE_CHECKS: list[TreeCheck] = [
    check_schemas, check_job_policies, check_terraform_structure, check_terraform_tools,
]


def check_kustomize(tree: Tree) -> tuple[list[Problem], int]:
    """Build every kustomization with the real kubectl, on a scratch copy of the tree."""
    with tempfile.TemporaryDirectory(prefix="gkr-validate-") as scratch:
        for path, text in tree.files.items():
            target = Path(scratch, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        folders = [f for f in tree.kustomizations() if "/components/" not in f"/{f}/"]
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda f: build(Path(scratch, f)), folders))
    problems = [
        Problem(f"{folder}/kustomization.yaml", None, "", f"kubectl kustomize failed: "
                f"{result.stderr.strip().replace(scratch, '')}")
        for folder, result in zip(folders, results, strict=True) if result.returncode != 0
    ]
    return problems, len(folders)


def validate_tree(tree: Tree, catalog: Catalog, kustomize: bool = True) -> int:
    """Run every check; raise CheckFailed listing all problems; return overlays built."""
    problems = [problem for check in TREE_CHECKS for problem in check(tree, catalog)]
    built = 0
    if kustomize and not problems:
        found, built = check_kustomize(tree)
        problems += found
    if problems:
        raise CheckFailed("\n".join(str(p) for p in sorted(set(problems), key=Problem.sort_key)))
    return built
