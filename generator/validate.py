"""`gkr validate`: what Argo CD will apply, checked.

* `validate_repository` renders afresh (every spec and catalog rule runs), then checks the
  generated tree as it is on disk, the one Argo CD syncs: every manifest against its schema,
  the policies, metadata syntax and object size, the Terraform roots, and `kubectl kustomize`
  of every committed overlay in place (a broken committed kustomization.yaml fails). Last,
  it says whether the tree on disk is stale against the fresh render.
* `validate_specs` checks the named specs: their rules, and every check that applies to
  their manifests alone; its report names the checks that need the whole tree.

Checks over a tree share one protocol (`TreeCheck`), so platform policies add themselves to
MANIFEST_CHECKS or TREE_CHECKS without touching the flow.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from generator import schemas
from generator.catalog import Catalog
from generator.errors import CheckFailed, InvalidInput, Problem, StaleTree
from generator.experiments import resolve_all
from generator.images import placeholders, provenance_problems
from generator.journal import recover
from generator.kustomize import PassedBuilds, build
from generator.lock import tree_lock
from generator.manifests import render_job
from generator.names import (
    annotations_problem,
    label_value_problem,
    object_size_problem,
    qualified_name_problem,
)
from generator.output import scan
from generator.paths import WARDEN_GENERATED, job_path
from generator.placement import spec_files
from generator.platform.checks import (
    check_chart_values,
    check_terraform_structure,
    check_terraform_tools,
)
from generator.policies import check_job_policies
from generator.render import render_tree
from generator.specs import load_spec
from generator.trainconfig import TrainingReport, check_training, start_training_check
from generator.tree import Tree
from generator.yamlio import load_all_rendered

TreeCheck = Callable[[Tree, Catalog], list[Problem]]
KUSTOMIZATION = "kustomization.yaml"
# What render writes; `images` (the image transformer: names to pinned references) reads
# nothing outside the file.
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "components", "images"}
STALE_LISTED = 10  # files named in a "stale" message; the rest are counted


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


def _name(document: dict[str, Any]) -> str:
    return f"{document.get('kind', '?')}/{document.get('metadata', {}).get('name', '?')}"


def _metadata(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """The object's metadata and every pod template's, each with where it sits."""
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict):
            yield f"{path}.metadata" if path else "metadata", node["metadata"]
        for key, value in node.items():
            if key != "metadata":
                yield from _metadata(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _metadata(value, f"{path}[{index}]")


def _metadata_problems(metadata: dict[str, Any]) -> Iterator[str]:
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    for key, value in labels.items():
        for problem in (qualified_name_problem(str(key)), label_value_problem(value)):
            if problem is not None:
                yield f"label {problem}"
    if (problem := annotations_problem(annotations)) is not None:
        yield problem


def check_metadata(tree: Tree, catalog: Catalog) -> list[Problem]:
    """Label keys and values and annotations as the API server validates them (the schemas
    only say they are strings)."""
    return [Problem(path, None, f"{_name(document)} {where}", message)
            for path, documents in tree.manifests.items() for document in documents
            for where, metadata in _metadata(document)
            for message in _metadata_problems(metadata)]


def check_object_sizes(tree: Tree, catalog: Catalog) -> list[Problem]:
    return [Problem(path, None, _name(document), why)
            for path, documents in tree.manifests.items() for document in documents
            if (why := object_size_problem(document)) is not None]


# Checks that apply to any set of manifests, and those that need the whole tree.
MANIFEST_CHECKS: list[TreeCheck] = [
    check_schemas, check_job_policies, check_metadata, check_object_sizes,
]
TREE_CHECKS: list[TreeCheck] = [
    *MANIFEST_CHECKS, check_terraform_structure, check_terraform_tools, check_chart_values,
]
SKIPPED_FOR_SPECS = (
    "kubectl kustomize of the overlays",
    "the comparison of the committed tree with a fresh render",
    "the Terraform roots",
    "the add-ons' Helm values against their charts",
)


@dataclass(frozen=True)
class Report:
    """What a validation checked; `skipped` names the checks it did not run."""

    specs: int
    manifests: int
    built: int = 0
    skipped: tuple[str, ...] = ()
    configs: int = 0  # training configs composed (generator.trainconfig)
    configs_unchecked: int = 0  # training runs whose config is not in the repository
    placeholders: tuple[str, ...] = ()  # images whose digest no build has produced yet

    def summary(self) -> str:
        text = (f"valid: {self.specs} specs, {self.manifests} manifests, "
                f"{self.built} kustomizations built, {self.configs} training configs")
        if self.configs_unchecked:
            text += f" ({self.configs_unchecked} not checked: not in the repository)"
        if self.placeholders:
            text += (f"; {len(self.placeholders)} images not built yet, their digests "
                     f"placeholders ({', '.join(self.placeholders)}): `gkr images list`")
        if self.skipped:
            text += (f"; not checked here: {', '.join(self.skipped)} "
                     "(run `gkr validate` without paths for those)")
        return text


def _overlay_folders(kustomizations: list[str]) -> list[str]:
    """Folders kubectl builds: base and overlays (components are built through their users:
    the accelerators' through overlays, Warden's generated one through platform/warden)."""
    return [f for f in kustomizations
            if "/components/" not in f"/{f}/" and f != WARDEN_GENERATED]


def _kustomization_problem(root: Path, folder: str, text: str | None) -> str | None:
    """Why kubectl must not build a committed kustomization: gkr writes only local
    resources and components, so anything else (a remote URL, a path out of the repository,
    a generator or a plugin) would make kubectl read or fetch what gkr never put there."""
    try:
        documents = load_all_rendered(text or "")
    except yaml.YAMLError as error:
        return f"not valid YAML: {getattr(error, 'problem', error)}"
    if len(documents) != 1 or not isinstance(documents[0], dict):
        return "not one kustomization object"
    extra = sorted(set(map(str, documents[0])) - KUSTOMIZATION_KEYS)
    if extra:
        return f"holds {', '.join(extra)}, which gkr never writes; not built"
    entries = [e for key in ("resources", "components") for e in documents[0].get(key) or []]
    base = Path(os.path.normpath(root / folder))
    for entry in entries:
        target = Path(os.path.normpath(base / str(entry)))
        if "://" in str(entry) or not target.is_relative_to(Path(os.path.normpath(root))):
            return f"{entry!r} is not a path inside the repository; not built"
    return None


def build_overlays(root: Path, folders: list[str],
                   passed: PassedBuilds | None = None) -> list[Problem]:
    """`kubectl kustomize` of each folder under root, four at a time; with `passed`, a
    folder whose inputs already built is not built again."""
    folders = [f for f in folders if not (passed and passed.passed(f))]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda f: build(root / f), folders))
    for folder, result in zip(folders, results, strict=True):
        if passed and result.returncode == 0:
            passed.remember(folder)
    return [
        Problem(f"{folder}/{KUSTOMIZATION}", None, "", "kubectl kustomize failed: "
                f"{result.stderr.strip().replace(f'{root}/', '').replace(str(root), '.')}")
        for folder, result in zip(folders, results, strict=True) if result.returncode != 0
    ]


def _passed_builds(root: Path, fresh: Tree, disk: Tree) -> PassedBuilds | None:
    """Earlier builds are reused only when every kustomization on disk is the one gkr
    renders: then each build reads exactly the files PassedBuilds hashes."""
    mine = {p: t for p, t in fresh.files.items() if p.endswith(KUSTOMIZATION)}
    if {p: t for p, t in disk.files.items() if p.endswith(KUSTOMIZATION)} != mine:
        return None
    return PassedBuilds(root, disk.files)


def check_kustomize(tree: Tree) -> tuple[list[Problem], int]:
    """Build every kustomization of an in-memory tree, on a scratch copy of it."""
    folders = _overlay_folders(tree.kustomizations())
    with tempfile.TemporaryDirectory(prefix="gkr-validate-") as scratch:
        for path, text in tree.files.items():
            target = Path(scratch, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return build_overlays(Path(scratch), folders), len(folders)


def _fail(problems: list[Problem], note: str = "") -> CheckFailed:
    lines = [str(p) for p in sorted(set(problems), key=Problem.sort_key)]
    return CheckFailed("\n".join(lines + ([note] if note else [])))


def validate_tree(tree: Tree, catalog: Catalog, kustomize: bool = True) -> int:
    """Every check on an in-memory tree; raise CheckFailed listing all problems; return the
    number of kustomizations built."""
    problems = [problem for check in TREE_CHECKS for problem in check(tree, catalog)]
    built = 0
    if kustomize and not problems:
        found, built = check_kustomize(tree)
        problems += found
    if problems:
        raise _fail(problems)
    return built


def _committed(root: Path, fresh: Tree) -> dict[str, bytes]:
    """The generated files on disk, read as `gkr diff` reads them (after finishing any
    switch a killed render left behind)."""
    with tree_lock(root):
        recover(root)
        return scan(root, fresh).current


def _parse_file(path: str, data: bytes) -> tuple[str | None, list[dict[str, Any]], list[Problem]]:
    """A committed file's text and, for a manifest file, its documents; or its problems."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, [], [Problem(path, None, "", "not UTF-8 text")]
    if path.endswith(".json"):
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            return None, [], [Problem(path, error.lineno, "", f"not valid JSON: {error.msg}")]
        return text, [], []
    if not path.endswith((".yaml", ".yml")) or path.endswith(KUSTOMIZATION):
        return text, [], []
    try:
        documents = load_all_rendered(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        return text, [], [Problem(path, mark.line + 1 if mark else None, "",
                                  f"not valid YAML: {getattr(error, 'problem', error)}")]
    if not all(isinstance(document, dict) for document in documents):
        return text, [], [Problem(path, None, "", "holds a document that is not an object")]
    return text, documents, []


def disk_tree(root: Path, fresh: Tree) -> tuple[Tree, list[Problem]]:
    """The generated tree as it is on disk, parsed; a file identical to the fresh render's
    reuses that parse (the usual case: only changed files are parsed)."""
    tree, problems = Tree(jobs=fresh.jobs), []
    for path, data in sorted(_committed(root, fresh).items()):
        if fresh.files.get(path, "").encode() == data and data:
            tree.files[path] = fresh.files[path]
            if path in fresh.manifests:
                tree.manifests[path] = fresh.manifests[path]
            continue
        text, documents, found = _parse_file(path, data)
        problems += found
        if text is not None:
            tree.files[path] = text
        if documents:
            tree.manifests[path] = documents
    return tree, problems


def _stale(fresh: Tree, disk: Tree) -> list[str]:
    return sorted(p for p in set(fresh.files) | set(disk.files)
                  if fresh.files.get(p) != disk.files.get(p))


def _stale_note(paths: list[str]) -> str:
    listed = ", ".join(paths[:STALE_LISTED])
    more = f" and {len(paths) - STALE_LISTED} more" if len(paths) > STALE_LISTED else ""
    return (f"the tree on disk is stale: {listed}{more} differ from a fresh render; "
            "run `gkr render` and commit the result")


def validate_repository(root: Path, kustomize: bool = True,
                        catalog: Catalog | None = None) -> Report:
    """Rules on every spec and catalog file, then every check on the tree on disk (what
    Argo CD applies), then staleness. Raises InvalidInput (a spec or catalog file),
    CheckFailed (a fault in the tree on disk) or StaleTree."""
    catalog = catalog or Catalog(root)
    fresh = render_tree(root, catalog)
    unproven = provenance_problems(root, catalog)
    if unproven:
        raise InvalidInput(unproven)
    training = start_training_check(root, fresh.jobs)  # composes meanwhile
    disk, problems = disk_tree(root, fresh)
    problems += [problem for check in TREE_CHECKS for problem in check(disk, catalog)]
    folders = _overlay_folders(disk.kustomizations())
    refused = {f: why for f in folders if (why := _kustomization_problem(
        root, f, disk.files.get(f"{f}/{KUSTOMIZATION}"))) is not None}
    problems += [Problem(f"{f}/{KUSTOMIZATION}", None, "", why) for f, why in refused.items()]
    if kustomize:
        problems += build_overlays(root, [f for f in folders if f not in refused],
                                   _passed_builds(root, fresh, disk))
    configs = _training_configs(training())
    stale = _stale(fresh, disk)
    if problems:
        raise _fail(problems, _stale_note(stale) if stale else "")
    if stale:
        raise StaleTree(_stale_note(stale))
    manifests = sum(len(documents) for documents in disk.manifests.values())
    skipped = () if kustomize else ("kubectl kustomize (--no-kustomize)",)
    return Report(len(fresh.jobs), manifests, len(folders) if kustomize else 0, skipped,
                  *configs, placeholders=tuple(placeholders(root)))


def _training_configs(report: TrainingReport) -> tuple[int, int]:
    """Raise InvalidInput for a bad training config (a spec's cmd or a config file), else
    return how many runs were composed and how many could not be."""
    if report.problems:
        raise InvalidInput(report.problems)
    return report.checked, report.unchecked


def validate_specs(root: Path, paths: list[Path], catalog: Catalog | None = None) -> Report:
    """The named specs (files or folders): rules, rendering, and MANIFEST_CHECKS on their
    manifests. Paths are taken as written: a symlink is checked when it is read."""
    catalog = catalog or Catalog(root)
    problems, tree = [], Tree()
    for path in spec_files(root, [p.absolute() for p in paths]):
        try:
            jobs = resolve_all(load_spec(path, root), catalog)
            for job in jobs:
                tree.add(job_path(job), render_job(job), job.source)
        except InvalidInput as error:
            problems += error.problems
            continue
        tree.jobs.extend(jobs)
    if problems:
        raise InvalidInput(problems)
    configs = _training_configs(check_training(root, tree.jobs))
    problems = [problem for check in MANIFEST_CHECKS for problem in check(tree, catalog)]
    if problems:
        raise _fail(problems)
    manifests = sum(len(documents) for documents in tree.manifests.values())
    return Report(len(tree.jobs), manifests, 0, SKIPPED_FOR_SPECS, *configs)
