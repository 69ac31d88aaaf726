"""Jobs Argo CD manages: gkr does not change them behind its back, since Argo CD's `selfHeal`
would undo a direct apply or delete (the overlays are synced with `selfHeal: true`).

A job is managed when its manifests are rendered in this repository's overlay (what Argo CD
syncs), or when the live object carries Argo CD's tracking mark: the annotation
`argocd.argoproj.io/tracking-id` (Argo CD's default tracking method since 3.0) or the label
`app.kubernetes.io/instance` (the default before 3.0, and kept with `annotation+label`); see
https://argo-cd.readthedocs.io/en/stable/user-guide/resource_tracking/.
"""

from __future__ import annotations

from pathlib import Path

from generator.errors import BadRequest
from generator.paths import job_file
from runtime.kube import Obj

TRACKING_ANNOTATION = "argocd.argoproj.io/tracking-id"
TRACKING_LABEL = "app.kubernetes.io/instance"


def tracking_app(obj: Obj) -> str | None:
    """The Argo CD application a live object belongs to, from its tracking mark."""
    meta = obj.get("metadata") or {}
    tracking = (meta.get("annotations") or {}).get(TRACKING_ANNOTATION)
    if tracking:  # "<app>:<group>/<kind>:<namespace>/<name>"
        return str(tracking).split(":", 1)[0]
    label = (meta.get("labels") or {}).get(TRACKING_LABEL)
    return str(label) if label else None


def managed_reason(root: Path, cluster: str, namespace: str, name: str,
                   live: Obj | None) -> str | None:
    """Why Argo CD manages job `name` (None: it does not)."""
    rendered = job_file(cluster, namespace, name)
    if (root / rendered).is_file():
        return f"its manifests are rendered in {rendered}, which Argo CD syncs"
    app = tracking_app(live) if live else None
    if app:
        return f"the live object belongs to the Argo CD application {app!r}"
    return None


def refuse_if_managed(root: Path, cluster: str, namespace: str, name: str, live: Obj | None,
                      action: str) -> None:
    """BadRequest when Argo CD manages the job (`action`: "apply" or "delete"): say why and
    what to do instead."""
    reason = managed_reason(root, cluster, namespace, name, live)
    if reason is None:
        return
    spec = f"jobs/<team>/{name}.yaml"
    instead = (f"delete {spec} in a pull request" if action == "delete" else
               f"change {spec} in a pull request (`gkr submit --gitops` makes the branch)")
    raise BadRequest(f"{namespace}/{name} is managed by Argo CD ({reason}), which would undo a "
                     f"direct {action}: {instead}, or pass --force")
