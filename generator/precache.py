"""The image pre-cache DaemonSet of a cluster (seed §3.2), finished once its jobs are known:
on every GPU node, one init container per image the cluster's jobs name starts and exits, so
the kubelet pulls each image before a job needs it. It warms the image of Warden's check Jobs
too, which start on a GPU node when it is repaired. The node add-ons' own images are left
out: their DaemonSets pull them as a node boots.

The catalog part of the render (cached) holds this draft; `render_tree` finishes it from the
rendered jobs' images, which the render cache keeps without their documents. Plain data and
no templates here, so a render with nothing to render stays light.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from generator.tree import Documents, RenderedJob


@dataclass(frozen=True)
class Precache:
    """`daemonset` has no init containers yet; each warm one is its keep-alive container
    (same pull policy, resources and security context) with another image and command."""

    daemonset: dict[str, Any]
    warm_command: tuple[str, ...]
    jobs_folder: str
    checks_image: str
    source: str  # the header's `from`

    def documents(self, jobs: Sequence[RenderedJob]) -> Documents:
        used = {image for job in jobs if job.path.startswith(self.jobs_folder + "/")
                for image in job.images}
        daemonset = copy.deepcopy(self.daemonset)
        pod = daemonset["spec"]["template"]["spec"]
        keep_alive = pod["containers"][0]
        images = sorted((used | {self.checks_image}) - {keep_alive["image"]})
        pod["initContainers"] = [
            {**keep_alive, "name": warm_name(image), "image": image,
             "command": list(self.warm_command)} for image in images]
        return [daemonset]


def warm_name(image: str) -> str:
    """A container name for an image: its repository's last part and a hash of the whole
    reference, so two tags of one repository stay two containers and a name never moves to
    another image when one is added."""
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    short = re.sub(r"[^a-z0-9-]+", "-", repository.lower()).strip("-")[:40]
    return f"warm-{short}-{hashlib.sha256(image.encode()).hexdigest()[:8]}"
