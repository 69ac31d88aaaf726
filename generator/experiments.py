"""A spec with a `diloco` section (seed §6) as the jobs it renders to; any other spec is the
one job it always was.

A DiLoCo experiment renders to:

* the synchroniser: a Job named after the spec, on the spec's cluster, running
  `python -m runtime.diloco`, with a Service of the same name in front of it;
* one RayJob per learner, `<spec>-<learner>`, on the learner's cluster and accelerator
  (each learner inherits the spec's fields and overrides where it runs).

All carry the run identity: the spec's name as the run, and the learner's name, as labels
and variables (`Label.RUN`, `Label.LEARNER`, `Env.RUN`, `Env.LEARNER`); each gets its
settings as JSON in `Env.DILOCO`. Each part is checked by the spec rules, on its own
cluster, with problems located at the field of the spec that set the value; the
experiment's own rules (learners reach the synchroniser) follow.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from generator.catalog import Catalog
from generator.errors import InvalidInput, Problem
from generator.kinds import KINDS
from generator.resolve import Exposure, ResolvedJob, assemble, resolve
from generator.rules import Context, Finding, findings
from generator.spec import Diloco, JobSpec, Learner
from generator.specs import LoadedSpec, SpecSource
from generator.units import parse_duration
from generator.yamlio import FieldPath
from runtime.diloco.config import KEY_DIR, DilocoConfig, SynchroniserConfig
from runtime.identity import Env, Label, Role

SYNCHRONISER_CMD = "python -m runtime.diloco"
SECTION = ("diloco",)
LEARNER_FIELDS = ("cluster", "accelerator", "pods", "gpus", "cpus", "memory")
# What the synchroniser's Job does not take from the spec: its pod is CPU-only and small.
NOT_FOR_SYNCHRONISER = ("diloco", "head", "relaunch_reservation", "rack_affinity",
                        "accelerator", "gpus", "cpus", "memory", "pods", "working_dir")
PER_VPC = "each cluster has its own VPC (terraform/modules/gke-cluster/network.tf)"
KEY_SECRET_SUFFIX = "diloco-keys"


@dataclass(frozen=True)
class _PartSource(SpecSource):
    """The spec's source, with the fields an experiment set for one part located where the
    spec wrote them (a learner's `cluster` at `diloco.learners.<i>.cluster`)."""

    moved: Mapping[str, FieldPath] = field(default_factory=dict)
    learner: str | None = None  # whose part this is: named where the spec's value is wrong

    def problem(self, path: FieldPath, message: str) -> Problem:
        head = str(path[0]) if path else ""
        if head in self.moved:
            return super().problem((*self.moved[head], *path[1:]), message)
        if self.learner is not None and head in LEARNER_FIELDS:  # right for some learners only
            message = f"for learner {self.learner}: {message}"
        return super().problem(path, message)


def resolve_all(loaded: LoadedSpec, catalog: Catalog) -> list[ResolvedJob]:
    """Every job of a spec, checked; raises InvalidInput with every problem found."""
    spec = loaded.spec
    if spec.diloco is None:
        return [resolve(loaded, catalog)]
    problems = [loaded.source.problem(path, message)
                for path, message in _experiment_findings(spec, spec.diloco)]
    try:
        synchroniser = resolve(_synchroniser_part(loaded), catalog)
        user_env = synchroniser.user_env
    except InvalidInput as error:
        problems += error.problems
        synchroniser, user_env = None, dict(spec.env)
    learners = [_checked_learner(loaded, index, catalog, problems)
                for index in range(len(spec.diloco.learners))]
    if problems:
        raise InvalidInput(list(dict.fromkeys(problems)))  # parts share fields: once each
    assert synchroniser is not None
    return _with_identity(spec, [synchroniser, *(
        assemble(part, loaded.source.team, loaded.source.display, user_env, catalog)
        for part in learners if part is not None)])


def assemble_all(spec: JobSpec, team: str | None, display: str, user_env: dict[str, str],
                 catalog: Catalog) -> list[ResolvedJob]:
    """Rebuild the jobs of a spec that passed `resolve_all` against this very catalog (the
    render cache keeps specs, not jobs)."""
    if spec.diloco is None:
        return [assemble(spec, team, display, user_env, catalog)]
    source = SpecSource(display, team=team)
    parts = [_synchroniser_spec(spec), *(_learner_part(LoadedSpec(spec, source), i)[0]
                                         for i in range(len(spec.diloco.learners)))]
    return _with_identity(spec, [assemble(part, team, display, user_env, catalog)
                                 for part in parts])


# -- the parts ----------------------------------------------------------------------------

def _fields(spec: JobSpec, dropped: tuple[str, ...]) -> dict[str, Any]:
    """The fields the spec set, as plain values, without `dropped`."""
    return {key: value for key, value in spec.model_dump(exclude_unset=True).items()
            if key not in dropped}


def _synchroniser_spec(spec: JobSpec) -> JobSpec:
    assert spec.diloco is not None
    own = spec.diloco.synchroniser
    values = _fields(spec, NOT_FOR_SYNCHRONISER)
    if spec.working_dir and spec.working_dir.startswith("/"):  # a path in the image
        values["working_dir"] = spec.working_dir
    return JobSpec.model_validate({**values, "kind": "job", "cmd": SYNCHRONISER_CMD, "pods": 1,
                                   "cpus": own.cpus, "memory": own.memory})


def _synchroniser_part(loaded: LoadedSpec) -> LoadedSpec:
    moved = {"cpus": (*SECTION, "synchroniser", "cpus"),
             "memory": (*SECTION, "synchroniser", "memory"),
             "kind": SECTION, "cmd": SECTION, "pods": SECTION}
    return LoadedSpec(_synchroniser_spec(loaded.spec), _moved(loaded.source, moved))


def _learner_part(loaded: LoadedSpec, index: int) -> tuple[JobSpec, _PartSource]:
    spec = loaded.spec
    assert spec.diloco is not None
    learner = spec.diloco.learners[index]
    where = (*SECTION, "learners", index)
    own = {name: getattr(learner, name) for name in LEARNER_FIELDS
           if name in learner.model_fields_set}
    values = {**_fields(spec, SECTION), **own, "name": _learner_job(spec.name, learner)}
    moved = {name: (*where, name) for name in (*own, "name")}
    return JobSpec.model_validate(values), _moved(loaded.source, moved, learner.name)


def _checked_learner(loaded: LoadedSpec, index: int, catalog: Catalog,
                     problems: list[Problem]) -> JobSpec | None:
    """A learner's job spec once the spec rules pass on its cluster (None: they do not)."""
    part, source = _learner_part(loaded, index)
    found = [source.problem(path, message)
             for path, message in findings(Context(part, source.team, None, catalog))]
    problems += found
    return None if found else part


def _moved(source: SpecSource, moved: Mapping[str, FieldPath],
           learner: str | None = None) -> _PartSource:
    return _PartSource(source.display, source.path, source.lines, source.team, source.flags,
                       source.root, moved, learner)


def _learner_job(experiment: str, learner: Learner) -> str:
    return f"{experiment}-{learner.name}"


# -- identity, settings, the Service --------------------------------------------------------

def _with_identity(spec: JobSpec, jobs: list[ResolvedJob]) -> list[ResolvedJob]:
    """The run identity and the settings on every part: the synchroniser first."""
    assert spec.diloco is not None
    synchroniser, *learners = jobs
    section = spec.diloco
    names = tuple(learner.name for learner in section.learners)
    parts = [_part(synchroniser, spec.name, "", _synchroniser_settings(spec, names),
                   _exposure(spec, synchroniser))]
    for index, (job, learner) in enumerate(zip(learners, section.learners, strict=True)):
        settings = _learner_settings(spec, synchroniser, job, index)
        parts.append(_part(job, spec.name, learner.name, settings, None))
    return parts


def _part(job: ResolvedJob, run: str, learner: str, settings: str,
          exposure: Exposure | None) -> ResolvedJob:
    workload = replace(job.workload, run=run, learner=learner)
    return replace(job, workload=workload, labels=job.spec.labels | workload.labels(),
                   gkr_env={Env.DILOCO: settings}, exposure=exposure,
                   key_secret=key_secret(job.name))


def key_secret(job: str) -> str:
    """The Secret holding a part's CURVE keys (made by `gkr diloco keys`, mounted at
    `KEY_DIR` in its pods: generator.pods.key_volumes)."""
    return f"{job}-{KEY_SECRET_SUFFIX}"


def _synchroniser_settings(spec: JobSpec, names: tuple[str, ...]) -> str:
    section = spec.diloco
    assert section is not None
    return SynchroniserConfig(
        bind=f"tcp://*:{section.synchroniser.port}", run=spec.name, learners=names,
        outer=section.outer, round_timeout_s=parse_duration(section.round_timeout),
        checkpoint=section.synchroniser.checkpoint, keys=KEY_DIR,
    ).model_dump_json()


def endpoint(spec: JobSpec, synchroniser: ResolvedJob, learner_cluster: str) -> str:
    """The address a learner on `learner_cluster` dials: the Service's cluster DNS name on
    the synchroniser's own cluster, the load balancer's address from any other."""
    own = spec.diloco.synchroniser if spec.diloco else None
    assert own is not None
    if learner_cluster == synchroniser.cluster.name or own.address is None:
        host = f"{synchroniser.name}.{synchroniser.namespace}.svc.cluster.local"
    else:
        host = own.address
    return f"tcp://{host}:{own.port}"


def _learner_settings(spec: JobSpec, synchroniser: ResolvedJob, job: ResolvedJob,
                      index: int) -> str:
    section = spec.diloco
    assert section is not None
    return DilocoConfig(
        enabled=True, endpoint=endpoint(spec, synchroniser, job.cluster.name),
        learner=section.learners[index].name, index=index, learners=len(section.learners),
        inner_steps=section.inner_steps, mode=section.mode, merge=section.merge,
        outer=section.outer, round_timeout_s=parse_duration(section.round_timeout),
        timeout_s=parse_duration(section.learner_timeout), keys=KEY_DIR,
    ).model_dump_json()


def _exposure(spec: JobSpec, synchroniser: ResolvedJob) -> Exposure:
    """The synchroniser's Service: in-cluster, or a network load balancer at the reserved
    address, open only to the learner clusters' ranges."""
    assert spec.diloco is not None
    own = spec.diloco.synchroniser
    service: dict[str, Any] = {
        "selector": {Label.JOB: synchroniser.name, Label.ROLE: str(Role.JOB)},
        "ports": [{"name": "diloco", "port": own.port, "targetPort": own.port,
                   "protocol": "TCP"}],
    }
    if own.expose == "load_balancer":
        service |= {"type": "LoadBalancer", "loadBalancerIP": own.address,
                    "loadBalancerSourceRanges": list(own.source_ranges)}
    else:
        service["type"] = "ClusterIP"
    return Exposure(service)


# -- the experiment's own rules --------------------------------------------------------------

def _experiment_findings(spec: JobSpec, section: Diloco) -> Iterator[Finding]:
    refused = dict(KINDS[spec.kind].refuses).get(SECTION[0])
    if refused is not None:
        yield SECTION, refused
        return
    yield from _unique_learners(section)
    yield from _reachable(spec, section)
    if parse_duration(section.learner_timeout) <= parse_duration(section.round_timeout):
        yield (*SECTION, "learner_timeout"), (
            f"{section.learner_timeout} must be longer than round_timeout "
            f"({section.round_timeout}): a learner outwaits a round that waits for others")
    if "merge" in section.model_fields_set and section.mode == "barrier":
        yield (*SECTION, "merge"), "applies to decoupled mode only (mode: decoupled)"


def _unique_learners(section: Diloco) -> Iterator[Finding]:
    seen: set[str] = set()
    for index, learner in enumerate(section.learners):
        if learner.name in seen:
            yield (*SECTION, "learners", index, "name"), f"{learner.name!r} is named twice"
        seen.add(learner.name)


def _reachable(spec: JobSpec, section: Diloco) -> Iterator[Finding]:
    """Learners on other clusters reach the synchroniser only through a load balancer at a
    reserved, routable address; a ClusterIP Service resolves inside its cluster only."""
    own, where = section.synchroniser, (*SECTION, "synchroniser")
    remote = [(i, learner) for i, learner in enumerate(section.learners)
              if (learner.cluster or spec.cluster) != spec.cluster]
    if own.expose == "cluster":
        for index, learner in remote:
            yield (*SECTION, "learners", index, "cluster"), (
                f"learner {learner.name} on {learner.cluster} cannot reach the synchroniser's "
                f"ClusterIP Service on {spec.cluster} (cluster.local names resolve inside one "
                "cluster); set diloco.synchroniser.expose: load_balancer with an address")
        for name in ("address", "source_ranges"):
            if name in own.model_fields_set:
                yield (*where, name), "only means something with expose: load_balancer"
        return
    yield from _load_balancer(own.address, own.source_ranges, where, bool(remote))


def _load_balancer(address: str | None, ranges: list[str], where: FieldPath,
                   remote: bool) -> Iterator[Finding]:
    if address is None:
        yield (*where, "address"), ("a load balancer needs the reserved IPv4 address the "
                                    "learners dial")
    else:
        yield from _address(address, (*where, "address"), remote)
    if not ranges:
        yield (*where, "source_ranges"), ("list the learner clusters' egress (NAT) ranges: "
                                          "CURVE refuses strangers, but only after each "
                                          "one's handshake")
    for index, text in enumerate(ranges):
        try:
            network = ipaddress.ip_network(text)
        except ValueError:
            yield (*where, "source_ranges", index), f"{text!r} is not a CIDR range"
            continue
        if network.prefixlen == 0:
            yield (*where, "source_ranges", index), (f"{text} admits everyone to the "
                                                     "synchroniser's handshakes")


def _address(text: str, where: FieldPath, remote: bool) -> Iterator[Finding]:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        yield where, f"{text!r} is not an IP address (reserve a static address and give it)"
        return
    if address.version != 4:
        yield where, "an IPv4 address (a Service's loadBalancerIP)"
    elif remote and not address.is_global:
        yield where, (f"{text} is private: learners on other clusters cannot reach it, as "
                      f"{PER_VPC}; reserve an external address")
