"""Warden's ConfigMap, platform/warden/generated/: the settings of the add-on catalog plus what
other sources decide (add-on service addresses, GKE facts, runtime.identity keys), checked
against Warden's own config model so that a catalog mistake fails `gkr render`, not Warden."""

from __future__ import annotations

from typing import Any

from generator.addons import ADDONS_FILE, Addons
from generator.catalog import load_model
from generator.errors import InvalidInput, Problem
from generator.manifests import render_template
from generator.paths import WARDEN_GENERATED as GENERATED
from generator.platform.context import PlatformContext
from generator.pods import RUNTIME_IMAGE, node_checks
from generator.yamlio import FieldPath, dump_documents, line_of
from runtime.errors import ConfigError
from runtime.identity import Taint
from runtime.pods import PREFLIGHT
from runtime.warden.config import WardenConfig, parse_config

CONFIGMAP = f"{GENERATED}/configmap.yaml"
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
        "checks": node_checks(ctx.catalog).model_dump(mode="json") | {"preflight": {
            "image": ctx.catalog.images[RUNTIME_IMAGE], "command": PREFLIGHT}},
        "reservations": {"taint_key": Taint.RESERVED_FOR},
    }


def warden_config(ctx: PlatformContext) -> dict[str, Any]:
    """The catalog's settings with the filled-in fields added; setting one of those is an error,
    so each fact keeps one source."""
    settings = ctx.addons.warden.settings
    config, clashes = dict(settings), []
    for section, facts in filled_in(ctx).items():
        given = settings.get(section, {})
        if not isinstance(given, dict):
            continue  # not a mapping: parse_config says what is allowed
        clashes += [(section, key) for key in sorted(set(given) & set(facts))]
        config[section] = {**given, **facts}
    if clashes:
        raise InvalidInput([_problem(ctx, loc, "filled in by `gkr render` from its source; "
                                     "remove it here") for loc in clashes])
    return config


def _problem(ctx: PlatformContext, loc: tuple[str | int, ...], message: str) -> Problem:
    """A problem at `warden.settings.<loc>` of the add-on catalog, with its line."""
    path = (*SETTINGS, *loc)
    lines = load_model(Addons, ctx.catalog.root / ADDONS_FILE, ctx.catalog.root)[1]
    return Problem(ADDONS_FILE, line_of(lines, path), ".".join(map(str, path)), message)
