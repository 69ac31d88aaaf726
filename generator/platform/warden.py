"""Warden's ConfigMap, platform/warden/generated/: the settings of the add-on catalog plus what
other sources decide (add-on service addresses, GKE facts, runtime.identity keys), checked
against Warden's own config model so that a catalog mistake fails `gkr render`, not Warden."""

from __future__ import annotations

from typing import Any

from generator.addons import ADDONS_FILE, Addons
from generator.catalog import IMAGES_FILE, load_model
from generator.errors import InvalidInput, Problem
from generator.manifests import render_template
from generator.paths import HEADER
from generator.paths import WARDEN_GENERATED as GENERATED
from generator.platform.context import PlatformContext
from generator.pods import RUNTIME_IMAGE, node_checks
from generator.yamlio import FieldPath, dump_documents, line_of
from runtime.errors import ConfigError
from runtime.identity import Taint
from runtime.pods import PREFLIGHT
from runtime.warden.config import WardenConfig, parse_config

CONFIGMAP = f"{GENERATED}/configmap.yaml"
STRESS_IMAGE = "dcgm"  # the catalog's DCGM image: Warden's stress test runs dcgmi in it
GKE_FILE = "platform/catalog/gke.yaml"
SETTINGS: FieldPath = ("warden", "settings")


def produce_warden(ctx: PlatformContext) -> None:
    config = warden_config(ctx)
    try:
        parse_config(config, CONFIGMAP)
    except ConfigError as error:
        raise InvalidInput([_problem(ctx, p.loc, f"{p.message} (in Warden's rendered config)")
                            for p in error.problems]) from None
    ordered = {key: config[key] for key in WardenConfig.model_fields if key in config}
    configmap = render_template("platform/warden_configmap.yaml.j2",
                                config_text=dump_documents([ordered]))
    ctx.add(CONFIGMAP, [configmap], f"{ADDONS_FILE} (warden), {GKE_FILE} and runtime.identity")
    ctx.tree.files[f"{GENERATED}/kustomization.yaml"] = (
        HEADER.format(source=IMAGES_FILE) + dump_documents([_component(ctx)]))


def _component(ctx: PlatformContext) -> dict[str, Any]:
    """platform/warden/ includes this Component: the ConfigMap, and the catalog's image for
    the Deployment's `image: gkr-runtime` (Kustomize's images transformer)."""
    repository, digest = ctx.catalog.images[RUNTIME_IMAGE].split("@", 1)
    return {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
            "resources": ["configmap.yaml"],
            "images": [{"name": RUNTIME_IMAGE, "newName": repository, "digest": digest}]}


def filled_in(ctx: PlatformContext) -> dict[str, dict[str, Any]]:
    """Config fields whose value another source owns, by config section."""
    warden, platform = ctx.addons.warden, ctx.catalog.platform
    return {
        "temporal": {"address": ctx.addons.address(warden.temporal)},
        "prometheus": {"url": f"http://{ctx.addons.address(warden.prometheus)}"},
        "detection": {"node_selector": platform.labels["accelerator"]},
        "recovery": {"preemptible_priority_classes": [
            platform.priorities["preemptible"].priority_class]},
        # The same check settings `gkr check` uses: both build the same Job for a node.
        "checks": node_checks(ctx.catalog).model_dump(mode="json") | {
            "preflight": {"image": ctx.catalog.images[RUNTIME_IMAGE], "command": PREFLIGHT},
            "stress": {"image": ctx.image(STRESS_IMAGE, "warden.settings.checks.stress")}},
        "reservations": {"taint_key": Taint.RESERVED_FOR},
    }


def warden_config(ctx: PlatformContext) -> dict[str, Any]:
    """The catalog's settings with the filled-in fields added; setting one of those is an error,
    so each fact keeps one source."""
    config, clashes = _merged(ctx.addons.warden.settings, filled_in(ctx), ())
    if clashes:
        raise InvalidInput([_problem(ctx, loc, "filled in by `gkr render` from its source; "
                                     "remove it here") for loc in clashes])
    return config


def _merged(given: dict[str, Any], facts: dict[str, Any],
            path: tuple[str, ...]) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
    """`given` with `facts` filled in, mappings merged key by key; and the paths both set."""
    merged, clashes = dict(given), []
    for key, fact in facts.items():
        if key not in given:
            merged[key] = fact
        elif isinstance(fact, dict) and isinstance(given[key], dict):
            merged[key], inner = _merged(given[key], fact, (*path, key))
            clashes += inner
        elif not isinstance(fact, dict):
            clashes.append((*path, key))
        # else: a mapping given as something else; parse_config says what is allowed
    return merged, clashes


def _problem(ctx: PlatformContext, loc: tuple[str | int, ...], message: str) -> Problem:
    """A problem at `warden.settings.<loc>` of the add-on catalog, with its line."""
    path = (*SETTINGS, *loc)
    lines = load_model(Addons, ctx.catalog.root / ADDONS_FILE, ctx.catalog.root)[1]
    return Problem(ADDONS_FILE, line_of(lines, path), ".".join(map(str, path)), message)
