"""`gkr submit`: flags and/or a spec file -> the same spec model, defaults, templates and checks
as `gkr render` -> server-side apply (or a dry run, or a GitOps branch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import git
import yaml
from pydantic import BaseModel, ConfigDict

from generator.catalog import Catalog
from generator.cluster.package import FsspecStore, archive
from generator.errors import BadRequest, InvalidInput, Problem
from generator.kinds import KindTraits, sentinel_name
from generator.manifests import render_job
from generator.paths import job_path
from generator.resolve import ResolvedJob, resolve
from generator.specs import LoadedSpec, load_spec, spec_from_flags
from generator.tree import Tree
from generator.validate import check_schemas
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


def _git_email(root: Path) -> str:
    try:
        return str(git.Repo(root, search_parent_directories=True).config_reader().get_value(
            "user", "email"))
    except Exception:  # no repository or no user.email: the spec model reports the field
        return ""


def _env_flag(flags: dict[str, Any], from_file: bool) -> dict[str, Any]:
    """`--env FILE`: absolute for a spec file; inlined into `env` for a spec made of flags."""
    if "env_file" not in flags:
        return flags
    path = Path(flags["env_file"]).expanduser().resolve()
    if from_file:
        return {**flags, "env_file": str(path)}
    if not path.is_file():
        raise InvalidInput([Problem("command line", None, "--env", f"{path} not found")])
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise InvalidInput([Problem(str(path), 1, "", "an env file maps NAME: \"value\"")])
    rest = {k: v for k, v in flags.items() if k != "env_file"}
    return {**rest, "env": {**data, **flags.get("env", {})}}


def load(request: SubmitRequest) -> LoadedSpec:
    flags = _env_flag(dict(request.flags), request.spec_file is not None)
    if request.spec_file is not None:
        return load_spec(request.spec_file.resolve(), request.root, flags)
    flags.setdefault("owner", _git_email(request.root))
    return spec_from_flags(flags)


def local_working_dir(loaded: LoadedSpec) -> Path | None:
    """A working_dir that names a folder on this machine is packaged (not a path in the image)."""
    value = loaded.spec.working_dir
    if not value or "://" in value or "working_dir" not in loaded.source.flags:
        return None
    folder = Path(value).expanduser()
    return folder.resolve() if folder.is_dir() else None


def prepare(request: SubmitRequest, catalog: Catalog, upload: bool) -> ResolvedJob:
    """Resolve the job; a local working dir is zipped and (if `upload`) put in the code store."""
    loaded = load(request)
    folder = local_working_dir(loaded)
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


def manifests(job: ResolvedJob, catalog: Catalog) -> list[Obj]:
    """Rendered and checked against the schemas, exactly as `gkr validate` would."""
    documents = render_job(job)
    tree = Tree()
    tree.add(job_path(job), documents, job.source)
    problems = check_schemas(tree, catalog)
    if problems:
        raise InvalidInput(problems)
    return documents


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
