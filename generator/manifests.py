"""Render one resolved job into Kubernetes manifests (dicts) through Jinja2 templates.

Templates print values with `tojson`, so the YAML they produce is parsed back into data
without any chance of a value changing the structure; pod templates are rendered once per
role and embedded as data.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jinja2

from generator.kinds import sentinel_name
from generator.pods import plan_pods
from generator.resolve import ResolvedJob
from generator.yamlio import load_all_rendered, load_rendered
from runtime.identity import Annotation, Label, Role
from runtime.pods import build_pod


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


class _Embeds:
    """Sub-documents placed by templates as tokens and swapped in after parsing.

    `{{ embed(value) }}` prints a token instead of serialising a structured value (a pod,
    an env list, a catalog sidecar), so the (slow, pure-Python) YAML constructor parses only
    the template's own structure.
    """

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    def __call__(self, value: Any) -> str:
        token = f"@gkr-embed-{len(self.objects)}@"
        # A JSON round trip is a fast deep copy: documents never share objects with the
        # catalog or with each other.
        self.objects[token] = json.loads(json.dumps(value))
        return json.dumps(token)

    def substitute(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.objects.get(node, node)
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
    return embeds.substitute(load_rendered(_render(name, {**values, "embed": embeds})))


def render_documents(name: str, **values: Any) -> list[dict[str, Any]]:
    """Every YAML document of a template, as data."""
    embeds = _Embeds()
    documents = load_all_rendered(_render(name, {**values, "embed": embeds}))
    return [embeds.substitute(document) for document in documents]


def render_job(job: ResolvedJob) -> list[dict[str, Any]]:
    """The manifests of one job, in apply order."""
    kueue = job.platform.kueue
    plans = plan_pods(job)
    pods = {str(role): build_pod(plan) for role, plan in plans.items()}
    ray = (render_template("ray_cluster_spec.yaml.j2", job=job, pods=pods)
           if Role.HEAD in plans else None)
    return render_documents(
        job.traits.template, job=job, pods=pods, ray_cluster_spec=ray,
        kueue_labels={kueue["queue_label"]: job.queue,
                      kueue["priority_label"]: job.priority.priority_class},
        sentinel={"name": sentinel_name(job.name), "labels": plans[Role.SENTINEL].labels,
                  "annotations": job.annotations | {Annotation.RAYCLUSTER: job.name},
                  "selector": {Label.JOB: job.name, Label.ROLE: str(Role.SENTINEL)}}
        if Role.SENTINEL in plans else None,
    )
