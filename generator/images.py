"""The platform's images, from a commit to a pinned digest (seed §3.2: "built by CI, pinned to
a digest in GKR, and cached asynchronously on each node").

`gkr images build NAME` builds the stage of platform/images/Containerfile that the catalog
names for NAME with buildah (no daemon), pushes it, and pins the digest the registry returns
into platform/catalog/images.yaml (comments and order kept), with its provenance in
platform/catalog/images.lock; then it re-renders the tree. `gkr images pin NAME` does the
same for an upstream image by tag, resolved with skopeo. `gkr validate` refuses a digest
without provenance (`provenance_problems`). A failed build, push or render leaves the catalog
and the tree as they were.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from ruamel.yaml import YAML

from generator.catalog import IMAGES_FILE, PINNED_IMAGE, Catalog, load_model
from generator.errors import BadRequest, GkrError, InvalidInput, Problem, ToolFailed
from generator.problems import problems_from_validation
from generator.vcs import load_git
from generator.yamlio import line_of, load_document, read_input

LOCK_FILE = "platform/catalog/images.lock"
CONTAINERFILE = "platform/images/Containerfile"
# What decides an image's layers besides the code: the provenance hashes them together.
DEFINITION = (CONTAINERFILE, ".containerignore", "requirements.lock", "pyproject.toml")
# The sources the images COPY: a build from a tree that changed them names no commit.
SOURCES = (*DEFINITION, "generator", "runtime", "README.md")
DIGEST = r"^sha256:[0-9a-f]{64}$"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    digest: str = Field(pattern=DIGEST)


class Built(_Record):
    """Built here by `gkr images build` from a commit."""

    kind: Literal["built"] = "built"
    stage: str
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    definition: str = Field(pattern=DIGEST)
    """sha256 over DEFINITION's files at the commit: a different value means a rebuild is due."""
    at: datetime


class Resolved(_Record):
    """An upstream image whose tag `gkr images pin` resolved to this digest."""

    kind: Literal["resolved"] = "resolved"
    source: str
    at: datetime


class Placeholder(_Record):
    """A digest no build has produced yet; `gkr validate` names it and pods using it would
    not start. The catalog's first images are placeholders until the main branch's pipeline
    builds them (.github/workflows/main.yml)."""

    kind: Literal["placeholder"] = "placeholder"
    reason: str


Provenance = Annotated[Built | Resolved | Placeholder, Field(discriminator="kind")]
_LOCK = TypeAdapter(dict[str, Provenance])


@dataclass(frozen=True)
class Buildah:
    """How buildah and skopeo are called: the storage driver (vfs where overlay is not
    available, e.g. in a container; CONTAINERS_STORAGE_CONF moves the storage) and TLS to the
    registry."""

    storage_driver: str | None = None
    tls_verify: bool = True

    def buildah(self, *args: str) -> list[str]:
        storage = ["--storage-driver", self.storage_driver] if self.storage_driver else []
        return ["buildah", *storage, *args]

    @property
    def tls(self) -> str:
        return f"--tls-verify={str(self.tls_verify).lower()}"


def read_lock(root: Path) -> dict[str, Built | Resolved | Placeholder]:
    """platform/catalog/images.lock; a missing lock is an empty one."""
    path = root / LOCK_FILE
    if not path.exists():
        return {}
    data, lines = load_document(LOCK_FILE, read_input(path, root, LOCK_FILE))
    try:
        return _LOCK.validate_python(data or {})
    except ValidationError as error:
        raise InvalidInput(problems_from_validation(error, LOCK_FILE, lines)) from None


def provenance_problems(root: Path, catalog: Catalog) -> list[Problem]:
    """Every digest of the catalog has a lock record with that digest; every record names an
    image of the catalog."""
    lock, lines = read_lock(root), load_model(type(catalog.image_catalog),
                                              root / IMAGES_FILE, root)[1]
    problems = []
    for name, ref in catalog.images.items():
        digest = _digest(ref)
        record = lock.get(name)
        if digest is None:
            continue
        if record is None:
            why = ("a digest without provenance: build it (`gkr images build "
                   f"{name}`) or pin it (`gkr images pin {name}`), never by hand")
        elif record.digest != digest:
            why = (f"the digest differs from its provenance in {LOCK_FILE} ({record.digest}): "
                   "it was edited by hand")
        else:
            continue
        problems.append(Problem(IMAGES_FILE, line_of(lines, ("images", name)),
                                f"images.{name}", why))
    problems += [Problem(LOCK_FILE, None, name, f"names no image of {IMAGES_FILE}")
                 for name in sorted(set(lock) - set(catalog.images))]
    return problems


def placeholders(root: Path) -> list[str]:
    return sorted(name for name, record in read_lock(root).items()
                  if isinstance(record, Placeholder))


def image_rows(root: Path) -> list[dict[str, str]]:
    """`gkr images list`: each catalog image and what its provenance says."""
    catalog, lock = Catalog(root), read_lock(root)
    current = definition_hash(root)
    return [{"name": name, "reference": ref,
             "provenance": _describe(lock.get(name), _digest(ref), current)}
            for name, ref in sorted(catalog.images.items())]


def _describe(record: Built | Resolved | Placeholder | None, digest: str | None,
              current: str) -> str:
    if digest is None:
        return "upstream, by tag"
    if record is None or record.digest != digest:
        return "NONE (gkr validate refuses it)"
    if isinstance(record, Placeholder):
        return f"placeholder: {record.reason}"
    if isinstance(record, Resolved):
        return f"resolved from {record.source} at {record.at:%Y-%m-%d %H:%M}Z"
    stale = "" if record.definition == current else "; the definition changed since: rebuild"
    return (f"built from {record.commit[:12]} (stage {record.stage}) "
            f"at {record.at:%Y-%m-%d %H:%M}Z{stale}")


def definition_hash(root: Path, commit: str | None = None) -> str:
    """sha256 over the definition's files, at a commit or in the working tree."""
    digest = hashlib.sha256()
    repo = load_git("hashing an image definition at a commit").Repo(root) if commit else None
    for path in DEFINITION:
        if repo is not None:
            data = repo.commit(commit).tree[path].data_stream.read()
        else:
            data = (root / path).read_bytes()
        digest.update(f"{path}\0{len(data)}\0".encode() + data)
    return f"sha256:{digest.hexdigest()}"


# --- build, push, resolve --------------------------------------------------------------------


@dataclass(frozen=True)
class Pinned:
    name: str
    reference: str
    record: Built | Resolved
    changed_files: int


def build(root: Path, name: str, registry: str | None, tools: Buildah) -> Pinned:
    """Build NAME's stage at HEAD, push it, pin the registry's digest, re-render."""
    catalog = Catalog(root)
    stage = catalog.image_catalog.builds.get(name)
    if stage is None:
        built = ", ".join(sorted(catalog.image_catalog.builds)) or "none"
        raise BadRequest(f"{name!r} is not built here (builds in {IMAGES_FILE}: {built}); an "
                         f"upstream image is pinned with `gkr images pin {name}`")
    commit, when = _clean_head(root)
    repository = _repository(catalog.images[name], registry)
    tag = f"{repository}:{commit[:12]}"
    _run(tools.buildah("bud", "--isolation", "chroot", "--layers", "--target", stage,
                       "--timestamp", str(int(when.timestamp())), "--file", CONTAINERFILE,
                       "--tag", tag, "."), root, f"building {name} (stage {stage})")
    digest = _push(tools, tag)
    record = Built(digest=digest, stage=stage, commit=commit,
                   definition=definition_hash(root, commit), at=datetime.now(UTC))
    return pin(root, name, f"{repository}@{digest}", record)


def resolve(root: Path, name: str, tools: Buildah) -> Pinned:
    """Pin an upstream image by tag to the digest its registry serves for that tag."""
    catalog = Catalog(root)
    ref = catalog.images.get(name)
    if ref is None or name in catalog.image_catalog.builds:
        raise BadRequest(f"{name!r} is not an upstream image of {IMAGES_FILE} (built ones are "
                         f"pinned by `gkr images build {name}`)")
    source = _upstream_source(root, name, ref)
    output = _run(["skopeo", "inspect", tools.tls, "--format", "{{.Digest}}",
                   f"docker://{source}"], root, f"resolving {source}")
    digest = output.strip()
    if not re.fullmatch(DIGEST, digest):
        raise ToolFailed(f"skopeo answered {digest!r} for {source}, not a sha256 digest")
    record = Resolved(digest=digest, source=source, at=datetime.now(UTC))
    return pin(root, name, f"{source.rsplit(':', 1)[0]}@{digest}", record)


def _upstream_source(root: Path, name: str, ref: str) -> str:
    """The tag to resolve: the catalog's, or the one a previous pin resolved."""
    if _digest(ref) is None:
        return ref
    record = read_lock(root).get(name)
    if isinstance(record, Resolved):
        return record.source
    raise BadRequest(f"{name!r} has no upstream tag to resolve: give it as repository:tag "
                     f"in {IMAGES_FILE}")


def _push(tools: Buildah, tag: str) -> str:
    with tempfile.TemporaryDirectory() as folder:
        digest_file = Path(folder) / "digest"
        _run(tools.buildah("push", tools.tls, "--digestfile", str(digest_file), tag), None,
             f"pushing {tag}")
        digest = digest_file.read_text().strip()
    if not re.fullmatch(DIGEST, digest):
        raise ToolFailed(f"the registry returned {digest!r} for {tag}, not a sha256 digest")
    return digest


def _clean_head(root: Path) -> tuple[str, datetime]:
    """HEAD's commit and time; refused when the sources the images copy differ from it, so
    that the provenance names the commit the image holds."""
    git = load_git("building an image (its provenance names a commit)")
    try:
        repo = git.Repo(root)
        head = repo.head.commit
    except (git.InvalidGitRepositoryError, ValueError) as error:
        raise BadRequest(f"{root} is not a git repository with a commit ({error}): the "
                         "provenance names the commit an image is built from") from None
    dirty = repo.git.status("--porcelain", "--untracked-files=all", "--", *SOURCES)
    if dirty:
        listed = ", ".join(line[3:] for line in dirty.splitlines()[:5])
        raise BadRequest(f"uncommitted changes in what the image copies ({listed}): commit "
                         "them first, so the provenance names the commit the image holds")
    return head.hexsha, head.committed_datetime


def _repository(ref: str, registry: str | None) -> str:
    """The repository to push to: the catalog's, or the same image name under --registry."""
    repository = ref.split("@", 1)[0]
    if registry is None:
        return repository
    if not re.fullmatch(r"[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*", registry):
        raise BadRequest(f"--registry {registry!r}: give HOST[:PORT][/PATH], e.g. "
                         "us-docker.pkg.dev/PROJECT/REPOSITORY")
    return f"{registry}/{repository.rsplit('/', 1)[-1]}"


def _digest(ref: str) -> str | None:
    return ref.rsplit("@", 1)[1] if re.fullmatch(PINNED_IMAGE, ref) else None


def _run(argv: Sequence[str], cwd: Path | None, doing: str) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ToolFailed(f"{doing}: {argv[0]} is not installed (Debian: apt-get install -y "
                         "buildah skopeo)") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise ToolFailed(f"{doing} failed ({argv[0]} exit {done.returncode}):\n{tail}")
    return done.stdout


# --- pin: the catalog, the lock and the tree together ----------------------------------------


def pin(root: Path, name: str, reference: str,
        record: Built | Resolved) -> Pinned:
    """Write NAME's reference into images.yaml and its record into the lock, then re-render;
    if the render fails, both files are put back."""
    from generator.output import write_tree
    from generator.render import render_tree

    images_text = _with_reference((root / IMAGES_FILE).read_text(), name, reference)
    lock = read_lock(root) | {name: record}
    with _replaced(root, {IMAGES_FILE: images_text, LOCK_FILE: _lock_text(lock)}):
        changes = write_tree(root, render_tree(root))
    return Pinned(name, reference, record, len(changes.written) + len(changes.removed))


def _with_reference(text: str, name: str, reference: str) -> str:
    """images.yaml with one reference replaced, by ruamel.yaml's round trip (comments, order
    and quoting kept)."""
    yaml = YAML()
    yaml.width = 4096  # a reference is one long scalar: never fold it
    data = yaml.load(text)
    data["images"][name] = reference
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _lock_text(lock: dict[str, Any]) -> str:
    yaml = YAML()
    yaml.width = 4096
    out = io.StringIO()
    out.write("# Written by `gkr images build` and `gkr images pin`: the provenance of every "
              f"digest in {IMAGES_FILE.rsplit('/', 1)[1]}.\n# `gkr validate` refuses a digest "
              "without a record here. Do not edit by hand.\n")
    records = {name: lock[name].model_dump(mode="json") for name in sorted(lock)}
    yaml.dump({name: {"kind": r.pop("kind"), **r} for name, r in records.items()}, out)
    return out.getvalue()


@contextmanager
def _replaced(root: Path, files: dict[str, str]) -> Iterator[None]:
    """Replace files atomically (each by a rename); restore them all if the block raises."""
    before = {path: (root / path).read_bytes() if (root / path).exists() else None
              for path in files}
    try:
        for path, text in files.items():
            _write_atomic(root / path, text.encode())
        yield
    except (GkrError, OSError):
        for path, data in before.items():
            if data is None:
                (root / path).unlink(missing_ok=True)
            else:
                _write_atomic(root / path, data)
        raise


def _write_atomic(path: Path, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, path)
