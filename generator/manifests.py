"""Render one resolved job into Kubernetes manifests (dicts) through Jinja2 templates.

Templates print values with `tojson`, so the YAML they produce is parsed back into data
without any chance of a value changing the structure; pod templates are rendered once per
role and embedded as data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

import jinja2
import yaml

from generator.errors import InvalidInput, Problem
from generator.kinds import sentinel_name
from generator.names import object_size_problem
from generator.netpolicy import network_policy
from generator.pods import METRICS_PORT, WORKER_GROUP, entrypoint, plan_pods
from generator.resolve import ResolvedJob
from runtime.identity import Annotation, Label, Role
from runtime.pods import build_pod

EMBED_TAG = "!embed"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("generator", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.filters["combine"] = lambda left, right: {**left, **right}
    env.globals["Label"] = Label  # identity keys come from runtime.identity, never literals
    return env


@dataclass(frozen=True)
class _Slot:
    """Where sub-document `index` goes: what `!embed N` parses to."""

    index: int


class _TemplateLoader(yaml.CSafeLoader):
    """libyaml for template output, which may hold `!embed N` slots."""


def _slot(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> _Slot:
    return _Slot(int(loader.construct_scalar(node)))


_TemplateLoader.add_constructor(EMBED_TAG, _slot)


class _Embeds:
    """Sub-documents placed by templates as tagged slots and swapped in after parsing.

    `{{ embed(value) }}` prints `!embed N` instead of serialising a structured value (a pod,
    an env list, a catalog sidecar), so the YAML constructor parses only the template's own
    structure. A slot is a YAML tag, and every user value is printed by `tojson` as a quoted
    string, so no user text (a cmd of `!embed 0`, say) can ever be taken for a slot.
    """

    def __init__(self) -> None:
        self.objects: list[Any] = []

    def __call__(self, value: Any) -> str:
        # A JSON round trip is a fast deep copy: documents never share objects with the
        # catalog or with each other.
        self.objects.append(json.loads(json.dumps(value)))
        return f"{EMBED_TAG} {len(self.objects) - 1}"

    def substitute(self, node: Any) -> Any:
        if isinstance(node, _Slot):
            return self.objects[node.index]
        if isinstance(node, dict):
            return {key: self.substitute(value) for key, value in node.items()}
        if isinstance(node, list):
            return [self.substitute(value) for value in node]
        return node


def _render(name: str, values: dict[str, Any]) -> str:
    return environment().get_template(name).render(**values)


def render_template(name: str, **values: Any) -> Any:
    """One YAML document from a template, as data."""
    embeds = _Embeds()
    text = _render(name, {**values, "embed": embeds})
    return embeds.substitute(yaml.load(text, Loader=_TemplateLoader))


def render_documents(name: str, **values: Any) -> list[dict[str, Any]]:
    """Every YAML document of a template, as data."""
    embeds = _Embeds()
    text = _render(name, {**values, "embed": embeds})
    return [embeds.substitute(document)
            for document in yaml.load_all(text, Loader=_TemplateLoader) if document is not None]


def render_job(job: ResolvedJob) -> list[dict[str, Any]]:
    """The manifests of one job, in apply order; an object too large for the API server is
    refused here, so that render, submit and validate PATH all refuse it."""
    documents = _job_documents(job)
    problems = [Problem(job.source, None, f"{document['kind']}/{job.name}", why)
                for document in documents if (why := object_size_problem(document)) is not None]
    if problems:
        raise InvalidInput(problems)
    return documents


def _job_documents(job: ResolvedJob) -> list[dict[str, Any]]:
    kueue = job.platform.kueue
    plans = plan_pods(job)
    pods = {str(role): build_pod(plan) for role, plan in plans.items()}
    ray = (render_template("ray_cluster_spec.yaml.j2", job=job, pods=pods,
                           metrics_port=METRICS_PORT, worker_group=WORKER_GROUP)
           if Role.HEAD in plans else None)
    return [*render_documents(
        job.traits.template, job=job, pods=pods, ray_cluster_spec=ray, entrypoint=entrypoint(job),
        kueue_labels={kueue["queue_label"]: job.queue,
                      kueue["priority_label"]: job.priority.priority_class},
        sentinel={"name": sentinel_name(job.name), "labels": plans[Role.SENTINEL].labels,
                  "annotations": job.annotations | {Annotation.RAYCLUSTER: job.name},
                  "selector": {Label.JOB: job.name, Label.ROLE: str(Role.SENTINEL)}}
        if Role.SENTINEL in plans else None,
    ), network_policy(job)]
