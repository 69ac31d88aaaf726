"""`gkr submit`: flags and/or a spec file -> the same spec model, defaults, templates and checks
as `gkr render` -> server-side apply (or a dry run, or a GitOps branch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from generator.catalog import Catalog
from generator.cluster.package import FsspecStore, archive, local_folder
from generator.errors import BadRequest, InvalidInput, Problem
from generator.experiments import resolve_all
from generator.kinds import KINDS, KindTraits, sentinel_name
from generator.manifests import render_job
from generator.paths import job_path
from generator.resolve import ResolvedJob, resolve
from generator.specs import LoadedSpec, load_spec, spec_from_flags
from generator.tree import Tree
from generator.validate import check_schemas
from generator.yamlio import load_document, read_input, refusal
from runtime.identity import Role
from runtime.kube import DEPLOYMENT, Kube, Obj


class SubmitRequest(BaseModel):
    """What the command line asked for, frozen at the boundary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flags: dict[str, Any]
    """Spec fields given as flags (only those given); they override the spec file."""
    spec_file: Path | None = None
    """-f SPEC.yaml."""
    root: Path
    """Repository root (catalog, templates, jobs/)."""


def _env_flag(flags: dict[str, Any], from_file: bool, root: Path) -> dict[str, Any]:
    """`--env FILE`: absolute for a spec file; inlined into `env` for a spec made of flags.
    Paths stay as written (not resolved), so a symlink inside the repository that leads out
    of it is still refused when the file is read (generator.yamlio.refusal)."""
    if "env_file" not in flags:
        return flags
    path = Path(flags["env_file"]).expanduser().absolute()
    if from_file:
        return {**flags, "env_file": str(path)}
    why = refusal(path, root, anywhere=True)
    if why is not None:
        raise InvalidInput([Problem("command line", None, "--env", f"{path}: {why}")])
    data, _ = load_document(str(path), read_input(path, root, str(path), anywhere=True))
    if not isinstance(data or {}, dict):
        raise InvalidInput([Problem(str(path), 1, "", "an env file maps NAME: \"value\"")])
    rest = {k: v for k, v in flags.items() if k != "env_file"}
    return {**rest, "env": {**(data or {}), **flags.get("env", {})}}


def load(request: SubmitRequest) -> LoadedSpec:
    flags = _env_flag(dict(request.flags), request.spec_file is not None, request.root)
    if request.spec_file is not None:
        return load_spec(request.spec_file.absolute(), request.root, flags)
    return spec_from_flags(flags)


def local_working_dir(loaded: LoadedSpec, root: Path) -> Path | None:
    """A working_dir that names a folder on this machine is packaged (not a path in the image);
    only a folder inside the repository or the current directory (see `local_folder`)."""
    value = loaded.spec.working_dir
    if not value or "://" in value or "working_dir" not in loaded.source.flags:
        return None
    return local_folder(value, [root, Path.cwd()])


def prepare(request: SubmitRequest, catalog: Catalog, upload: bool) -> ResolvedJob:
    """Resolve the job; a local working dir is zipped and (if `upload`) put in the code store."""
    loaded = load(request)
    folder = local_working_dir(loaded, request.root)
    if folder is None:
        return resolve(loaded, catalog)
    flags = {**request.flags, "working_dir": str(folder)}
    job = resolve(load(request.model_copy(update={"flags": flags})), catalog)
    store_uri = job.cluster.code_store
    if store_uri is None:
        raise BadRequest(f"cluster {job.cluster.name} names no code_store; pass a --working-dir "
                         "inside the image or add code_store to its catalog file")
    store = FsspecStore(store_uri)
    name, data = archive(folder, job.name)
    flags["working_dir"] = store.put(name, data) if upload else f"{store.prefix}/{name}"
    return resolve(load(request.model_copy(update={"flags": flags})), catalog)


def prepare_all(request: SubmitRequest, catalog: Catalog, upload: bool) -> list[ResolvedJob]:
    """Every job of the request: the one job, or a DiLoCo experiment's synchroniser and
    learners (`generator.experiments`), each bound for its own cluster."""
    loaded = load(request)
    if loaded.spec.diloco is None:
        return [prepare(request, catalog, upload)]
    if local_working_dir(loaded, request.root) is not None:
        raise BadRequest("a DiLoCo experiment's learners run on several clusters, each with "
                         "its own code store: give --working-dir as a gs:// URI or a path in "
                         "the image")
    return resolve_all(loaded, catalog)


def manifests(job: ResolvedJob, catalog: Catalog) -> list[Obj]:
    """Rendered and checked against the schemas, exactly as `gkr validate` would."""
    documents = render_job(job)
    tree = Tree()
    tree.add(job_path(job), documents, job.source)
    problems = check_schemas(tree, catalog)
    if problems:
        raise InvalidInput(problems)
    return documents


def find_job(api: Kube, name: str, namespace: str) -> tuple[KindTraits, Obj] | None:
    """The top-level object of job `name` (any kind) and its kind's traits; None if absent."""
    for traits in KINDS.values():
        found = api.find(api.kind(traits.api_version, traits.object_kind), name,
                         namespace=namespace)
        if found is not None:
            return traits, found
    return None


def delete_job(api: Kube, traits: KindTraits, name: str, namespace: str) -> None:
    """Delete a job's top-level object and, for a RayCluster, its sentinel (the Deployment is
    not owned by the RayCluster, so Kubernetes would not collect it)."""
    if Role.SENTINEL in traits.roles and api.find(DEPLOYMENT, sentinel_name(name),
                                                  namespace=namespace):
        api.delete(DEPLOYMENT, sentinel_name(name), namespace=namespace)
    api.delete(api.kind(traits.api_version, traits.object_kind), name, namespace=namespace)


def apply_all(api: Kube, documents: list[Obj]) -> list[Obj]:
    """Apply in order (the RayCluster before its sentinel); returns what the server holds."""
    return [api.apply(document) for document in documents]
