"""From what the command line asked for to resolved, schema-checked jobs, reading the spec once
and resolving it once: the same spec model, defaults, templates and checks as `gkr render`.

A local `--working-dir` is zipped first, so the spec is resolved with the code store URI it
will have; the archive is uploaded only once that spec (and its manifests) passed every check.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from generator.catalog import Catalog
from generator.cluster.package import FsspecStore, archive, local_folder
from generator.cluster.target import Asked, find_target
from generator.errors import BadRequest, InvalidInput, Problem
from generator.experiments import resolve_all
from generator.manifests import render_job
from generator.paths import job_path
from generator.resolve import ResolvedJob, resolve
from generator.specs import LoadedSpec, load_spec, spec_from_flags
from generator.tree import Tree
from generator.validate import check_schemas
from generator.vcs import git_email
from generator.yamlio import LineMap, load_document, read_input, refusal
from runtime.kube import Obj


@dataclass(frozen=True)
class SpecFlags:
    """Spec fields given on the command line, None where not given; they override the values
    of a spec file. Each is the spec field of the same name (generator.spec.JobSpec)."""

    name: str | None = None
    kind: str | None = None
    cluster: str | None = None
    namespace: str | None = None
    owner: str | None = None
    pods: int | None = None
    gpus: int | None = None
    cpus: float | None = None
    memory: str | None = None
    accelerator: str | None = None
    image: str | None = None
    working_dir: str | None = None
    env_file: Path | None = None
    preemptible: bool | None = None
    cmd: str | None = None
    deadline: str | None = None

    def given(self) -> dict[str, Any]:
        """The fields given, as a spec document spells them (`--cpus 80` is the integer 80,
        as a spec file would write it)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        given = {k: v for k, v in values.items() if v is not None}
        if "cpus" in given and float(given["cpus"]).is_integer():
            given["cpus"] = int(given["cpus"])
        if "env_file" in given:
            given["env_file"] = str(given["env_file"])
        return given


@dataclass(frozen=True)
class JobsRequest:
    """Which jobs: a spec file and/or flags, in a repository."""

    root: Path
    """Repository root (catalog, templates, jobs/)."""
    flags: SpecFlags = SpecFlags()
    """Spec fields given as flags."""
    spec_file: Path | None = None
    """-f SPEC.yaml."""


@dataclass(frozen=True)
class Package:
    """A zipped local working directory, bound for its cluster's code store."""

    store: FsspecStore
    name: str
    data: bytes

    @property
    def uri(self) -> str:
        return self.store.uri(self.name)

    def upload(self) -> str:
        return self.store.put(self.name, self.data)


@dataclass(frozen=True)
class Prepared:
    """The request's jobs (one, or a DiLoCo experiment's parts), each with its manifests, and
    the working-directory archive still to upload (None: nothing to ship)."""

    catalog: Catalog
    jobs: list[ResolvedJob]
    manifests: list[list[Obj]]
    package: Package | None = None
    notes: tuple[str, ...] = ()
    """What gkr decided for the user and says on stderr (a default owner)."""


def prepare_jobs(request: JobsRequest) -> Prepared:
    """Read the spec once, ship nothing yet, resolve once, render and schema-check."""
    catalog, flags, notes = _defaults(request)
    loaded = _load(request, flags)
    loaded, package = _package(loaded, request.root, catalog)
    jobs = _resolve(loaded, catalog)
    return Prepared(catalog, jobs, [manifests(job, catalog) for job in jobs], package, notes)


def _defaults(request: JobsRequest) -> tuple[Catalog, dict[str, Any], tuple[str, ...]]:
    """A spec made of flags only gets the cluster and namespace as other commands find them
    (generator.cluster.target) and the owner from `git config user.email`, said on stderr."""
    flags = request.flags.given()
    if request.spec_file is not None:
        return Catalog(request.root), flags, ()
    target = find_target(Asked(request.root, None, flags.get("cluster"), flags.get("namespace")))
    owner = flags.get("owner")
    notes: tuple[str, ...] = ()
    if not owner:
        owner = _git_owner(request.root)
        notes = (f"owner: {owner} (from git config user.email; --owner to change)",)
    defaults = {"cluster": target.cluster.name, "namespace": target.namespace, "owner": owner}
    return target.catalog, flags | defaults, notes


def _git_owner(root: Path) -> str:
    email = git_email(root)
    if not email:
        raise BadRequest("--owner is needed: no spec file names one and `git config user.email` "
                         "is not set")
    return email


def _load(request: JobsRequest, flags: dict[str, Any]) -> LoadedSpec:
    flags = _env_flag(flags, request.spec_file is not None, request.root)
    if request.spec_file is not None:
        return load_spec(request.spec_file.absolute(), request.root, flags)
    return spec_from_flags(flags)


def _env_flag(flags: dict[str, Any], from_file: bool, root: Path) -> dict[str, Any]:
    """`--env FILE`: absolute for a spec file; inlined into `env` for a spec made of flags."""
    if "env_file" not in flags:
        return flags
    path = Path(flags["env_file"]).expanduser().absolute()
    if from_file:
        return {**flags, "env_file": str(path)}
    data, _ = read_env_file(path, root)
    rest = {k: v for k, v in flags.items() if k != "env_file"}
    return {**rest, "env": {**data, **flags.get("env", {})}}


def read_env_file(path: Path, root: Path) -> tuple[dict[str, Any], LineMap]:
    """An env file named on the command line (it may be anywhere): its mapping and lines.
    Paths stay as written (not resolved), so a symlink inside the repository that leads out
    of it is still refused when the file is read (generator.yamlio.refusal)."""
    path = path.expanduser().absolute()
    why = refusal(path, root, anywhere=True)
    if why is not None:
        raise InvalidInput([Problem("command line", None, "--env", f"{path}: {why}")])
    data, lines = load_document(str(path), read_input(path, root, str(path), anywhere=True))
    if not isinstance(data or {}, dict):
        raise InvalidInput([Problem(str(path), 1, "", "an env file maps NAME: \"value\"")])
    return dict(data or {}), lines


def local_working_dir(loaded: LoadedSpec, root: Path) -> Path | None:
    """A working_dir that names a folder on this machine is packaged (not a path in the image);
    only a folder inside the repository or the current directory (see `local_folder`)."""
    value = loaded.spec.working_dir
    if not value or "://" in value or "working_dir" not in loaded.source.flags:
        return None
    return local_folder(value, [root, Path.cwd()])


def _package(loaded: LoadedSpec, root: Path,
             catalog: Catalog) -> tuple[LoadedSpec, Package | None]:
    """The spec with a local working dir replaced by the URI its archive will have."""
    folder = local_working_dir(loaded, root)
    if folder is None:
        return loaded, None
    if loaded.spec.diloco is not None:
        raise BadRequest("a DiLoCo experiment's learners run on several clusters, each with "
                         "its own code store: give --working-dir as a gs:// URI or a path in "
                         "the image")
    cluster = catalog.clusters.get(loaded.spec.cluster)
    if cluster is None:  # resolve names the unknown cluster; the folder is a valid path
        return _with_working_dir(loaded, str(folder)), None
    if cluster.code_store is None:
        raise BadRequest(f"cluster {cluster.name} names no code_store; pass a --working-dir "
                         "inside the image or add code_store to its catalog file")
    package = Package(FsspecStore(cluster.code_store), *archive(folder, loaded.spec.name))
    return _with_working_dir(loaded, package.uri), package


def _with_working_dir(loaded: LoadedSpec, value: str) -> LoadedSpec:
    return replace(loaded, spec=loaded.spec.model_copy(update={"working_dir": value}))


def _resolve(loaded: LoadedSpec, catalog: Catalog) -> list[ResolvedJob]:
    """The one job, or a DiLoCo experiment's synchroniser and learners (generator.experiments),
    each bound for its own cluster."""
    if loaded.spec.diloco is None:
        return [resolve(loaded, catalog)]
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
